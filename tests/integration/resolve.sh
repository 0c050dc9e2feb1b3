#!/usr/bin/env bash
# Integration: the process directory and address resolution across three gateways (so that a
# broadcast means something). Compute processes register with fedgate-node on the nodes; lookups
# are served from the announced cache, by a directed query (party C does not announce), by
# broadcast (party 0), or end as "not found" (then from the negative cache); a lookup for an exact
# ID is never answered with another party's process of the same node and local part. A restart with a new
# epoch and a process that stops heartbeating reach every peer; forged, replayed and stale peer
# messages change nothing. Cleans up on any exit.
# usage: resolve.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: resolve.sh BUILD_DIR}")
LAB_PREFIX=r$((RANDOM % 1000))
LAB_PARTIES=3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tools/lab.sh"
NODE=$LAB_BUILD/tools/fedgate-node
WORK=$(mktemp -d)
NODE_PIDS=()
cleanup() {
    local p
    for p in "${NODE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # Only these: a bare `wait` would also wait for the gateways, which lab_down stops.
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT

failures=0
check() { # check DESCRIPTION CMD... — runs CMD, records a failure instead of stopping
    local what=$1
    shift
    if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; failures=$((failures + 1)); fi
}
eq() { [[ $1 == "$2" ]] || { echo "     expected '$2', got '$1'" >&2; return 1; }; }
# jq-less JSON: jget a|b|c ARGS... -- PY-EXPR over the reply r
jctl() { local g=$1 expr=$2; shift 2; lab_ctl "$g" "$@" --json | python3 -c "import json,sys; r=json.load(sys.stdin); print($expr)"; }
stat() { jctl "$1" "r['resolution']$2" stats; }
# node a|b|c ARGS... — fedgate-node on that party's node, against its gateway
node() {
    local g=$1 ns gw
    shift
    case $g in a) ns=$NS_A_NODE gw=$A_IN_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ;; c) ns=$NS_C_NODE gw=$C_IN_IP ;; esac
    ip netns exec "$ns" "$NODE" --gateway "$gw" "$@"
}
resolve_field() { # resolve_field a PID KEY — one field of `fedgate-node resolve --json` on node a
    node "$1" resolve "$2" --json --timeout-ms 2000 | python3 -c "import json,sys; print(json.load(sys.stdin)['$3'])"
}
registered() { # registered b PID ARGS... — runs `register` in the background until it prints its line
    local g=$1 pid=$2 out=$WORK/reg-$1-$2-$RANDOM ns gw
    shift 2
    case $g in a) ns=$NS_A_NODE gw=$A_IN_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ;; c) ns=$NS_C_NODE gw=$C_IN_IP ;; esac
    # `ip netns exec` execs the program: $! is fedgate-node itself, so SIGTERM reaches it.
    ip netns exec "$ns" "$NODE" --gateway "$gw" register --pid "$pid" "$@" >"$out" 2>&1 &
    NODE_PIDS+=($!)
    LAST_NODE_PID=$!
    lab_wait "node $g to register $pid" grep -q "^registered $pid" "$out" || { cat "$out" >&2; return 1; }
}
in_dir() { [[ $(jctl "$1" "r['kind']+' '+str(r['record']['epoch'])" dir show "$2" 2>/dev/null) == "$3" ]]; }
not_in_dir() { ! lab_ctl "$1" dir show "$2" >/dev/null 2>&1; }

lab_edit_configs() {
    # Short heartbeats so expiry is quick (yet generous on a loaded machine), a negative entry that
    # outlives the slowest step between two lookups; C does not announce, so its processes need directed queries.
    local f
    for f in "$A_CONF" "$B_CONF" "$C_CONF"; do
        printf '\n[resolve]\nheartbeat_ms = 250\nheartbeat_timeout_ms = 4000\nnegative_ttl_ms = 60000\n' >>"$f"
    done
    echo 'announce = false' >>"$C_CONF"
}
lab_up

# --- registration and its refusals ---
registered b 2.7.42 --transport tcp --listen "$B_NODE_IP:5000"
B_PROC=$LAST_NODE_PID
registered c 3.5.9 --transport roce_v2 --listen "$C_NODE_IP:4791" --qpn 0x1234 --mtu 4096
check "B lists 2.7.42 as local" in_dir b 2.7.42 "local $(jctl b "r['record']['epoch']" dir show 2.7.42)"
check "registering another party's ID is refused" \
    eq "$(node b register --pid 1.7.1 --transport tcp --listen "$B_NODE_IP:5001" --once 2>&1 || true)" \
    "fedgate-node: register refused: wrong_party"
check "registering another node's address is refused" \
    eq "$(node b register --pid 2.7.2 --transport tcp --listen 198.18.2.77:5001 --once 2>&1 || true)" \
    "fedgate-node: register refused: address_mismatch"
check "B counted both refusals" eq "$(stat b "['directory']['refused_wrong_party'], r['resolution']['directory']['refused_address']")" "1 1"

# --- cache hit after announce ---
epoch=$(jctl b "r['record']['epoch']" dir show 2.7.42)
check "A learns 2.7.42 from B's announce" lab_wait "A to hold 2.7.42" in_dir a 2.7.42 "announced $epoch"
check "C learns 2.7.42 from B's announce" lab_wait "C to hold 2.7.42" in_dir c 2.7.42 "announced $epoch"
hits=$(stat a "['resolve']['hits']")
check "node a resolves 2.7.42 from A's cache" eq "$(resolve_field a 2.7.42 source) $(resolve_field a 2.7.42 address)" \
    "cache $B_NODE_IP:5000"
check "A counted the cache hits" eq "$(stat a "['resolve']['hits']")" "$((hits + 2))"

# --- directed query: C does not announce ---
check "A holds nothing of C's (no announce)" not_in_dir a 3.5.9
directed=$(stat a "['resolve']['directed']")
check "node a resolves 3.5.9 by a directed query to C" \
    eq "$(resolve_field a 3.5.9 source) $(resolve_field a 3.5.9 qpn) $(resolve_field a 3.5.9 mtu)" "directed 4660 4096"
check "A sent one directed query" eq "$(stat a "['resolve']['directed']")" "$((directed + 1))"
check "A cached C's answer" lab_wait "A to cache 3.5.9" eval '[[ $(jctl a "r[\"kind\"]" dir show 3.5.9) == answered ]]'
check "fedgatectl resolve takes the daemon's own path" eq "$(jctl a "r['status'], r['source']" resolve 3.5.9)" "ok cache"

# --- broadcast: party 0, exactly one party holds it ---
b_found=$(stat b "['resolve']['peer_queries_found']")
c_no=$(stat c "['resolve']['peer_queries_not_here']")
check "node a resolves 0.7.42 by broadcast to B" \
    eq "$(resolve_field a 0.7.42 source) $(resolve_field a 0.7.42 pid)" "broadcast 2.7.42"
check "B answered the broadcast once" eq "$(stat b "['resolve']['peer_queries_found']")" "$((b_found + 1))"
check "C said not here once" eq "$(stat c "['resolve']['peer_queries_not_here']")" "$((c_no + 1))"

# --- a lookup for an exact ID: the owner says "not here", the broadcast must not take another
# party's process on the same node and local part (C's 3.5.9 for B's 2.5.9) ---
c_no=$(stat c "['resolve']['peer_queries_not_here']")
check "node a's lookup of 2.5.9 is not answered with C's 3.5.9" eq "$(resolve_field a 2.5.9 status)" "not_found"
check "C was asked for exactly 2.5.9 and said not here" eq "$(stat c "['resolve']['peer_queries_not_here']")" "$((c_no + 1))"
check "A holds no record under 2.5.9" eval '! jctl a "r[\"record\"][\"pid\"]" dir show 2.5.9 >/dev/null 2>&1'
check "a party-0 lookup 0.5.9 still finds C's process under its real ID" eq "$(resolve_field a 0.5.9 status) $(resolve_field a 0.5.9 pid)" "ok 3.5.9"

# --- not found, then from the negative cache ---
check "unknown 2.99.99 is not found" eq "$(resolve_field a 2.99.99 status)" "not_found"
neg=$(stat a "['resolve']['negative']")
check "the second lookup is served from the negative cache" eq "$(resolve_field a 2.99.99 status)" "not_found"
check "A counted a negative hit" eq "$(stat a "['resolve']['negative']")" "$((neg + 1))"
check "fedgate-node exits 1 on not found" eval "! node a resolve 2.99.99 >/dev/null 2>&1"

# --- a restart with a new epoch reaches every peer ---
kill -TERM "$B_PROC"
wait "$B_PROC" || true
check "B's process deregistered on SIGTERM" lab_wait "2.7.42 to leave A" not_in_dir a 2.7.42
registered b 2.7.42 --transport tcp --listen "$B_NODE_IP:5002" --epoch 777
check "A sees the new epoch" lab_wait "A to hold epoch 777" in_dir a 2.7.42 "announced 777"
check "C sees the new epoch" lab_wait "C to hold epoch 777" in_dir c 2.7.42 "announced 777"
check "node c resolves the new address" eq "$(resolve_field c 2.7.42 address)" "$B_NODE_IP:5002"

# --- a process that stops heartbeating disappears everywhere ---
node b register --pid 2.7.50 --transport tcp --listen "$B_NODE_IP:5050" --once >/dev/null
check "A learns 2.7.50" lab_wait "A to hold 2.7.50" lab_ctl a dir show 2.7.50
check "B expires 2.7.50" lab_wait "B to expire 2.7.50" not_in_dir b 2.7.50
check "A drops 2.7.50" lab_wait "A to drop 2.7.50" not_in_dir a 2.7.50
check "C drops 2.7.50" lab_wait "C to drop 2.7.50" not_in_dir c 2.7.50
check "B counted the expiry" eq "$(stat b "['directory']['expired']")" "1"

# --- forged, replayed and stale peer messages change nothing ---
ip netns exec "$NS_JOIN" ip addr add 198.19.0.99/24 dev "${LAB_PREFIX}j-br"
key_ab=$(/usr/bin/python3 -c "import tomllib; c=tomllib.load(open('$A_CONF','rb')); print([p['key'] for p in c['peer'] if p['party']=='beta'][0])")
forge() { ip netns exec "$NS_JOIN" /usr/bin/python3 "$HERE/peer_msg.py" --dst "$A_EXT_IP" "$@"; }
drops() { jctl a "r['drops_by_reason']['$1']" stats; }
bad_mac=$(drops resolve_bad_mac) unknown=$(drops resolve_unknown_peer) replayed=$(drops resolve_replayed)
skew=$(drops resolve_clock_skew)
id_ab=$(jctl a "[p for p in r['peers'] if p['party']=='beta'][0]['keys'][0]['id']" status)
forge --src "$B_EXT_IP" --party 2 --key 00112233445566778899aabbccddeeff --key-id "$id_ab" announce 2.9.9 198.18.2.10:1
check "a forged announce is dropped as a bad MAC" lab_wait "bad MAC drop" eval "[[ \$(drops resolve_bad_mac) == $((bad_mac + 1)) ]]"
forge --src 198.19.0.99 --party 2 --key "$key_ab" announce 2.9.9 198.18.2.10:1
check "an announce from an unknown address is dropped" lab_wait "unknown peer drop" eval "[[ \$(drops resolve_unknown_peer) == $((unknown + 1)) ]]"
forge --src "$B_EXT_IP" --party 2 --key "$key_ab" --seq-offset-s -3600 sync
check "a stale message is dropped for clock skew" lab_wait "clock skew drop" eval "[[ \$(drops resolve_clock_skew) == $((skew + 1)) ]]"
forge --src "$B_EXT_IP" --party 2 --key "$key_ab" --repeat 2 sync
check "the replayed copy of a good message is dropped" lab_wait "replay drop" eval "[[ \$(drops resolve_replayed) == $((replayed + 1)) ]]"
check "none of them put 2.9.9 in A's directory" not_in_dir a 2.9.9
check "A still resolves 2.7.42 from B's announce" eq "$(resolve_field a 2.7.42 address)" "$B_NODE_IP:5002"

# --- the management commands ---
check "dir list --local on B shows its one process" eq "$(jctl b "r['total']" dir list --local)" "1"
check "dir list --remote on A excludes nothing local" eq "$(jctl a "r['total'] > 0 and all(e['kind'] != 'local' for e in r['entries'])" dir list --remote)" "True"
usage_names_pid() { local out; out=$(lab_ctl a dir show 1.2 2>&1) && return 1; [[ $out == *"PID must be PARTY.NODE.LOCAL"* ]]; }
check "fedgatectl dir show names a bad PID" usage_names_pid

lab_down
check "all three gateways exited 0" eq "$LAB_RC_A $LAB_RC_B $LAB_RC_C" "0 0 0"
echo "$failures failure(s)"
((failures == 0))
