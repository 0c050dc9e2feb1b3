#!/usr/bin/env bash
# Integration: the etcd harness of lib_etcd.sh on its own, and what etcd's v3 JSON gateway answers
# in each state of the cluster — what a gateway's control threads will see.
#
# Brings the three-member cluster up and a client namespace onto its management network
# (etcd_attach); puts and gets a key with etcdctl. Then, from the client namespace with curl
# (--max-time 3), the same requests — range (a key that exists, one that does not, a serializable
# read), put, lease grant (TTL 2), lease keepalive, a txn whose compare fails and one whose compare
# holds, GET /health — each printed with its HTTP code, curl's exit code, its time and the body:
#   healthy:      against member 3;
#   one down:     member 1 killed; etcdctl put/get still work; against member 3;
#   killed:       against member 1 itself (connection refused);
#   quorum lost:  member 2 killed too; against member 3 once it has no leader (writes and quorum
#                 reads cannot succeed), and range, put and lease grant once more with --max-time 30
#                 to see what etcd answers in the end;
# then restarts members 1 and 2 on their data dirs and checks that the cluster is healthy again and
# that every key written while it had quorum is there. etcd_down, and checks it left no namespace,
# link, process or work dir behind, and that a second etcd_down does nothing. Cleans up on any exit.
# Prints PASS/FAIL per check; exits 0 only when all passed.
# usage: etcd_harness.sh
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
for tool in etcd etcdctl curl python3 ip; do
    command -v $tool >/dev/null || { echo "etcd_harness.sh: $tool is missing (tools/deps.sh installs it)"; exit 1; }
done

HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib_etcd.sh"

PREFIX=eh$((RANDOM % 1000))
NS_CLI=$PREFIX-cli
CLI_IP=198.18.250.100
WORK=$(mktemp -d)
cleanup() {
    etcd_down
    [[ ! -e /run/netns/$NS_CLI ]] || ip netns delete "$NS_CLI" 2>/dev/null || true
    rm -rf -- "$WORK"
}
trap cleanup EXIT

FAILURES=0
check() { # check DESCRIPTION CMD...
    local what=$1
    shift
    if "$@"; then echo "PASS - $what"; else echo "FAIL - $what"; FAILURES=$((FAILURES + 1)); fi
}
# require DESCRIPTION CMD...: a check the rest depends on; stops the test when it fails
require() { local before=$FAILURES; check "$@"; ((FAILURES == before)) || exit 1; }
fails() { ! "$@" >/dev/null 2>&1; }
quiet() { "$@" >/dev/null; }
eq() { [[ $1 == "$2" ]] || { echo "     expected '$2', got '$1'" >&2; return 1; }; }
b64() { printf %s "$1" | base64 -w0; }
# jq_py FILE PY-EXPR: a Python expression over the JSON in FILE (as r); prints its value
jq_py() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

K1=fedgate/harness/k1 K2=fedgate/harness/k2 K3=fedgate/harness/k3 K4=fedgate/harness/k4 KNONE=fedgate/harness/none
URL3=http://198.18.250.13:2379 URL1=http://198.18.250.11:2379

# ---- probes: one curl from the client namespace, its answer kept under STATE.NAME
declare -A CODE RC TIME
probe() { # probe STATE NAME MAXTIME URL METHOD [BODY]
    local state=$1 name=$2 max=$3 url=$4 method=$5 body=${6:-} out rc=0 w
    out=$WORK/$state.$name
    local args=(-sS --noproxy '*' --max-time "$max" -o "$out.body" -w '%{http_code} %{time_total}' -X "$method")
    [[ -z $body ]] || args+=(-H 'Content-Type: application/json' -d "$body")
    : >"$out.body"
    w=$(ip netns exec "$NS_CLI" curl "${args[@]}" "$url" 2>"$out.err") || rc=$?
    CODE[$state.$name]=${w%% *} TIME[$state.$name]=${w##* } RC[$state.$name]=$rc
    printf '  %-12s %-6s %-22s -> HTTP %s, curl exit %s, %ss\n' "$state" "$method" "${url#http://}" \
        "${CODE[$state.$name]}" "$rc" "${TIME[$state.$name]}"
    [[ -z $body ]] || printf '      request:  %s\n' "$body"
    [[ ! -s $out.body ]] || printf '      response: %s\n' "$(cat "$out.body")"
    [[ ! -s $out.err ]] || printf '      curl:     %s\n' "$(cat "$out.err")"
}
body_of() { cat "$WORK/$1.body"; }
field() { jq_py "$WORK/$1.body" "$2"; } # field STATE.NAME PY-EXPR

LEASE_ID=  # the last lease granted
# probe_all STATE URL [MAXTIME]: the set of requests; the keepalive names the lease just granted,
# or (when the grant did not answer) the last one granted before.
probe_all() {
    local s=$1 u=$2 max=${3:-3} id
    echo "--- $s: requests to ${u#http://} (curl --max-time $max)"
    probe "$s" range "$max" "$u/v3/kv/range" POST "{\"key\":\"$(b64 $K1)\"}"
    probe "$s" range_none "$max" "$u/v3/kv/range" POST "{\"key\":\"$(b64 $KNONE)\"}"
    probe "$s" range_serial "$max" "$u/v3/kv/range" POST "{\"key\":\"$(b64 $K1)\",\"serializable\":true}"
    probe "$s" put "$max" "$u/v3/kv/put" POST "{\"key\":\"$(b64 $K2)\",\"value\":\"$(b64 "put-$s")\"}"
    probe "$s" grant "$max" "$u/v3/lease/grant" POST '{"TTL":2}'
    id=$(field "$s.grant" "r['ID']" 2>/dev/null) || id=$LEASE_ID
    [[ -z $id || ${CODE[$s.grant]} != 200 ]] || LEASE_ID=$id
    probe "$s" keepalive "$max" "$u/v3/lease/keepalive" POST "{\"ID\":\"$id\"}"
    probe "$s" txn_fail "$max" "$u/v3/kv/txn" POST \
        "{\"compare\":[{\"key\":\"$(b64 $K1)\",\"target\":\"VALUE\",\"result\":\"EQUAL\",\"value\":\"$(b64 nope)\"}],\"success\":[{\"request_put\":{\"key\":\"$(b64 $K3)\",\"value\":\"$(b64 "txn-$s")\"}}],\"failure\":[{\"request_range\":{\"key\":\"$(b64 $K1)\"}}]}"
    probe "$s" txn_ok "$max" "$u/v3/kv/txn" POST \
        "{\"compare\":[{\"key\":\"$(b64 $K1)\",\"target\":\"VALUE\",\"result\":\"EQUAL\",\"value\":\"$(b64 v1)\"}],\"success\":[{\"request_put\":{\"key\":\"$(b64 $K3)\",\"value\":\"$(b64 "txn-$s")\"}}],\"failure\":[{\"request_range\":{\"key\":\"$(b64 $K1)\"}}]}"
    probe "$s" health "$max" "$u/health" GET
}
# all_answer STATE CODE: every request of the set got HTTP CODE
all_answer() {
    local n ok=0
    for n in range range_none range_serial put grant keepalive txn_fail txn_ok health; do
        [[ ${CODE[$1.$n]} == "$2" ]] || { echo "     $n: HTTP ${CODE[$1.$n]}" >&2; ok=1; }
    done
    return $ok
}
all_refused() { # every request of the set failed to connect (curl exit 7)
    local n ok=0
    for n in range range_none range_serial put grant keepalive txn_fail txn_ok health; do
        [[ ${RC[$1.$n]} == 7 && ${CODE[$1.$n]} == 000 ]] || { echo "     $n: curl exit ${RC[$1.$n]}, HTTP ${CODE[$1.$n]}" >&2; ok=1; }
    done
    return $ok
}
no_answer() { # no_answer STATE NAME...: none of them got a 2xx
    local s=$1 n ok=0
    shift
    for n in "$@"; do [[ ${CODE[$s.$n]} != 2* ]] || { echo "     $n: HTTP ${CODE[$s.$n]}" >&2; ok=1; }; done
    return $ok
}
py_true() { [[ $(jq_py "$WORK/$1.body" "$2" 2>/dev/null) == True ]]; } # py_true STATE.NAME BOOL-EXPR

# Checks on the answers of a member that has quorum.
check_answers() {
    local s=$1 put_value=$2
    check "$s: every gateway request answered 200" all_answer "$s" 200
    check "$s: range gives the key's value" eq "$(field "$s.range" "r['kvs'][0]['value']")" "$(b64 v1)"
    check "$s: range of a missing key has no kvs and no count" py_true "$s.range_none" "'kvs' not in r and 'count' not in r"
    check "$s: revisions and IDs are JSON strings" py_true "$s.range" \
        "all(isinstance(x, str) for x in (r['header']['revision'], r['header']['member_id'], r['count'], r['kvs'][0]['mod_revision']))"
    check "$s: lease grant gives a string ID and TTL \"2\"" py_true "$s.grant" "isinstance(r['ID'], str) and r['TTL'] == '2'"
    check "$s: keepalive answers under result with the lease's ID" py_true "$s.keepalive" \
        "r['result']['ID'] == '$LEASE_ID' and 'TTL' in r['result']"
    check "$s: a failed txn compare has no succeeded field and runs the failure branch" py_true "$s.txn_fail" \
        "'succeeded' not in r and r['responses'][0]['response_range']['kvs'][0]['value'] == '$(b64 v1)'"
    check "$s: a txn compare that holds gives succeeded true" py_true "$s.txn_ok" \
        "r['succeeded'] is True and 'response_put' in r['responses'][0]"
    check "$s: /health says true" eq "$(body_of "$s.health")" '{"health":"true"}'
    check "$s: the gateway's put landed" eq "$(etcd_ctl get --print-value-only $K2)" "$put_value"
}

# ---- up
t0=$SECONDS
require "etcd_up brings three healthy members up" etcd_up "$PREFIX"
echo "     cluster healthy $((SECONDS - t0)) s after etcd_up began; work dir $ETCD_WORK"
check "ETCD_ENDPOINTS names the three members" eq "$ETCD_ENDPOINTS" \
    "http://198.18.250.11:2379,http://198.18.250.12:2379,http://198.18.250.13:2379"
check "ETCD_URLS holds the three members" eq "${#ETCD_URLS[@]} ${ETCD_URLS[2]}" "3 $URL3"
check "ETCD_ENDPOINTS is exported" eq "$(bash -c 'echo "$ETCD_ENDPOINTS"')" "$ETCD_ENDPOINTS"
check "a member's log is written" test -s "$ETCD_WORK/etcd1.log"
ip netns add "$NS_CLI"
ip -n "$NS_CLI" link set lo up
require "etcd_attach joins a namespace to the management network" etcd_attach "$NS_CLI" "$CLI_IP"
check "etcd_attach refuses a member's address" fails etcd_attach "$NS_CLI" 198.18.250.12
check "etcd_attach refuses an address outside 198.18.250.0/24" fails etcd_attach "$NS_CLI" 10.0.0.5
check "etcdctl put" quiet etcd_ctl put $K1 v1
check "etcdctl get" eq "$(etcd_ctl get --print-value-only $K1)" v1
check "etcdctl member list shows three started members" eq "$(etcd_ctl member list | grep -c ', started, ')" 3

# ---- healthy
probe_all healthy "$URL3"
check_answers healthy put-healthy
echo "--- healthy: create-if-absent, and an unknown lease"
create_txn="{\"compare\":[{\"key\":\"$(b64 $K4)\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"$(b64 $K4)\",\"value\":\"$(b64 first)\"}}],\"failure\":[{\"request_range\":{\"key\":\"$(b64 $K4)\"}}]}"
probe healthy create_absent 3 "$URL3/v3/kv/txn" POST "$create_txn"
probe healthy create_present 3 "$URL3/v3/kv/txn" POST "$create_txn"
probe healthy keepalive_unknown 3 "$URL3/v3/lease/keepalive" POST '{"ID":"1"}'
probe healthy put_unknown_lease 3 "$URL3/v3/kv/put" POST "{\"key\":\"$(b64 $K4)\",\"value\":\"$(b64 leased)\",\"lease\":\"1\"}"
check "healthy: create-if-absent (CREATE == 0) succeeds on a missing key" py_true healthy.create_absent "r['succeeded'] is True"
check "healthy: create-if-absent fails on the key it created, and the failure branch reads it" py_true healthy.create_present \
    "'succeeded' not in r and r['responses'][0]['response_range']['kvs'][0]['value'] == '$(b64 first)'"
check "healthy: keepalive of an unknown lease answers 200 without a TTL" py_true healthy.keepalive_unknown \
    "r['result']['ID'] == '1' and 'TTL' not in r['result']"
check "healthy: a put under an unknown lease is refused" no_answer healthy put_unknown_lease

# ---- one member down
etcd_kill 1
check "member 1 is gone after etcd_kill 1" bash -c "! ip netns pids $PREFIX-etcd1 | grep -q ."
check "members 2 and 3 are healthy with member 1 down" etcd_wait_healthy 2 3
check "one down: etcdctl put" quiet etcd_ctl put $K1 v1
check "one down: etcdctl put of a second key" quiet etcd_ctl put fedgate/harness/one-down written
check "one down: etcdctl get" eq "$(etcd_ctl get --print-value-only fedgate/harness/one-down)" written
probe_all one_down "$URL3"
check_answers one_down put-one_down
SPARE_LEASE=$(etcd_ctl lease grant 600 | awk '/granted/ { print $2 }')
echo "     a 600 s lease for the keepalive once quorum is lost: $SPARE_LEASE (hex), $((16#$SPARE_LEASE)) (decimal)"
LEASE_ID=$((16#$SPARE_LEASE))

# ---- a killed member
probe_all killed "$URL1"
check "killed: every request to member 1 is refused (curl exit 7, no HTTP code)" all_refused killed

# ---- quorum lost
etcd_kill 2
t_kill=$(date +%s.%N)
no_leader() { _etcd_ctl_at "$URL3" --dial-timeout=2s --command-timeout=3s endpoint status -w json | grep -q 'no leader'; }
check "member 3 reports no leader after member 2 is killed" _etcd_wait "member 3 without leader" no_leader
echo "     member 3 had no leader $(python3 -c "import time; print(round(time.time() - $t_kill, 2))") s after the kill"
echo "     endpoint status of member 3: $(_etcd_ctl_at "$URL3" endpoint status -w json 2>/dev/null)"
probe_all quorum_lost "$URL3"
check "quorum lost: put, lease grant, keepalive and both txns get no 2xx" no_answer quorum_lost put grant keepalive txn_fail txn_ok
check "quorum lost: a linearizable range gets no 2xx" no_answer quorum_lost range range_none
check "quorum lost: a serializable range still answers 200 with the value" \
    eq "${CODE[quorum_lost.range_serial]} $(field quorum_lost.range_serial "r['kvs'][0]['value']" 2>/dev/null)" "200 $(b64 v1)"
check "quorum lost: /health does not answer 200" no_answer quorum_lost health
echo "--- quorum_lost, with patience: what etcd answers in the end (curl --max-time 30)"
probe quorum_lost_30 range 30 "$URL3/v3/kv/range" POST "{\"key\":\"$(b64 $K1)\"}"
probe quorum_lost_30 put 30 "$URL3/v3/kv/put" POST "{\"key\":\"$(b64 $K2)\",\"value\":\"$(b64 put-lost)\"}"
probe quorum_lost_30 grant 30 "$URL3/v3/lease/grant" POST '{"TTL":2}'
probe quorum_lost_30 keepalive 30 "$URL3/v3/lease/keepalive" POST "{\"ID\":\"$LEASE_ID\"}"
probe quorum_lost_30 health 30 "$URL3/health" GET
check "quorum lost, with patience: range, put and grant still get no 2xx" no_answer quorum_lost_30 range put grant
t=$SECONDS
check "quorum lost: etcdctl put fails" fails etcd_ctl --command-timeout=3s put $K1 lost
echo "     (etcdctl put gave up after $((SECONDS - t)) s)"

# ---- restart both
check "etcd_start 1" etcd_start 1
check "etcd_start 2" etcd_start 2
check "etcd_start refuses a member that runs" fails etcd_start 3
t0=$SECONDS
check "the cluster is healthy again after restarting members 1 and 2" etcd_wait_healthy
echo "     healthy again $((SECONDS - t0)) s after the restarts"
check "after restart: three started members" eq "$(etcd_ctl member list | grep -c ', started, ')" 3
check "after restart: the first key survived" eq "$(etcd_ctl get --print-value-only $K1)" v1
check "after restart: the key written with one member down survived" eq "$(etcd_ctl get --print-value-only fedgate/harness/one-down)" written
check "after restart: the last gateway put with quorum survived (none while quorum was lost)" eq "$(etcd_ctl get --print-value-only $K2)" put-one_down
check "after restart: member 1 (restarted) has every key" eq \
    "$(_etcd_ctl_at "$URL1" get --consistency=s --print-value-only fedgate/harness/one-down)" written
check "after restart: etcdctl put" quiet etcd_ctl put $K1 v1-again
probe restarted range 3 "$URL1/v3/kv/range" POST "{\"key\":\"$(b64 $K1)\"}"
check "after restart: the gateway of member 1 answers a range with the new value" \
    eq "${CODE[restarted.range]} $(field restarted.range "r['kvs'][0]['value']" 2>/dev/null)" "200 $(b64 v1-again)"
probe restarted health 3 "$URL1/health" GET

# ---- down
member_pids="$(for n in 1 2 3; do ip netns pids "$PREFIX-etcd$n"; done | tr '\n' ' ')"
work=$ETCD_WORK
etcd_down
check "etcd_down: no namespace of the prefix is left" eq "$(ip netns list | grep -c "^$PREFIX-\(store\|etcd[123]\)\b" || true)" 0
check "etcd_down: the attached namespace lost its management link" bash -c "! ip -n $NS_CLI link show dev ${PREFIX:0:6}m100 2>/dev/null"
check "etcd_down: no link of the prefix in the root namespace" eq "$(ip -br link | grep -c "^${PREFIX:0:6}" || true)" 0
check "etcd_down: no etcd process of the cluster is left ($member_pids)" bash -c "for p in $member_pids; do ! kill -0 \$p 2>/dev/null || exit 1; done"
check "etcd_down: the work dir is gone" test ! -e "$work"
check "a second etcd_down does nothing and succeeds" etcd_down

echo "etcd_harness.sh: $FAILURES failure(s)"
((FAILURES == 0))
