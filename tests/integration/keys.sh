#!/usr/bin/env bash
# Integration: peer keys rotated without a flag day, and a flood of forged peer messages.
#
# Rotation of the alpha-beta key under traffic, in the three steps the operator's guide gives:
# both gateways take the new key as next_key; each in turn makes it the current key (keeping the
# old one as next); both drop the old one. A reload after each edit. Throughout, node a keeps
# looking up processes of party beta that do not exist (each a directed query and a signed answer),
# and after each step a process registered on either side is announced to the other. Checked: no
# lookup is unreachable, every announce arrives, neither gateway drops a message as a bad MAC or
# an unknown key ID, `status` shows the same key IDs and fingerprints at both ends, and the key ID
# beta's messages come under follows beta's change. A message under the retired key is dropped as
# an unknown key ID.
#
# Flood: with A's per-peer MAC budget at 1000/s, forged messages from beta's address as fast as a
# sender can make them, while iperf3 runs through a port-map mapping pair; prints the forwarding
# rate before and during the flood, and checks A checked no more MACs than the budget allows,
# dropped the rest unchecked, and kept forwarding. Cleans up on any exit.
# usage: keys.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
for tool in iperf3 openssl; do
    command -v $tool >/dev/null || { echo "keys.sh: $tool is missing (tools/deps.sh installs it)"; exit 1; }
done

LAB_BUILD=$(realpath "${1:?usage: keys.sh BUILD_DIR}")
LAB_PREFIX=k$((RANDOM % 1000))
LAB_PARTIES=3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tools/lab.sh"
NODE=$LAB_BUILD/tools/fedgate-node
WORK=$(mktemp -d)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done  # not `wait`: the gateways are lab_down's
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT

VERIFY_RATE=1000 VERIFY_BURST=100
lab_edit_configs() {
    printf '\n[resolve]\npeer_verify_rate = %d\npeer_verify_burst = %d\n' "$VERIFY_RATE" "$VERIFY_BURST" >>"$A_CONF"
}
lab_up

py() { /usr/bin/python3 -c "$@"; }
# The alpha-beta key as topo.sh wrote it into both files.
pair_key() { py "import tomllib,sys; c=tomllib.load(open(sys.argv[1],'rb')); print([p['key'] for p in c['peer'] if p['party']==sys.argv[2]][0])" "$@"; }
K1=$(pair_key "$A_CONF" beta)
lab_check "both ends hold the same alpha-beta key" lab_eq "$(pair_key "$B_CONF" alpha)" "$K1"
K2=$(openssl rand -hex 32)
# edit FILE OLD NEW — replaces the peer's key lines OLD (exact text) with NEW in FILE
edit() { py "import sys; p,o,n=sys.argv[1:]; t=open(p).read(); assert t.count(o)==1, (p,o); open(p,'w').write(t.replace(o,n))" "$@"; }
reload() { lab_ctl "$1" reload >/dev/null; }
# keys_of a beta — "ROLE:ID:FINGERPRINT ..." of gateway a's keys for peer beta
keys_of() { lab_json "$1" "' '.join(k['role']+':'+str(k['id'])+':'+k['fingerprint'] for p in r['peers'] if p['party']=='$2' for k in p['keys'])" status; }
last_key_of() { lab_json "$1" "[p['last_key_id'] for p in r['peers'] if p['party']=='$2'][0]" status; }
drops() { lab_json "$1" "r['drops_by_reason']['$2']" stats; }
more_drops() { (($(drops "$1" "$2") > $3)); }  # more_drops a REASON N — A has dropped more than N for REASON

node() { # node a|b ARGS... — fedgate-node on that party's node
    local g=$1 ns gw
    shift
    case $g in a) ns=$NS_A_NODE gw=$A_IN_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ;; esac
    ip netns exec "$ns" "$NODE" --gateway "$gw" "$@"
}
registered() { # registered a|b PID — registers PID in the background until it prints its line
    local out=$WORK/reg-$1-$2 ns gw ip
    case $1 in a) ns=$NS_A_NODE gw=$A_IN_IP ip=$A_NODE_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ip=$B_NODE_IP ;; esac
    # `ip netns exec` execs the program: $! is fedgate-node itself, so SIGTERM reaches it.
    ip netns exec "$ns" "$NODE" --gateway "$gw" register --pid "$2" --transport tcp --listen "$ip:7000" >"$out" 2>&1 &
    BG_PIDS+=($!)
    lab_wait "node $1 to register $2" grep -q "^registered $2" "$out" || { cat "$out" >&2; return 1; }
}
announced() { # announced a|b PID — the other gateway learns PID from the announce stream
    local other=b
    [[ $1 == a ]] || other=a
    registered "$1" "$2" && lab_wait "$other to learn $2" lab_ctl "$other" dir show "$2"
}

# Step 0: the pair's one key, and announces both ways before anything changes.
id1=$(keys_of a beta | cut -d: -f2)
lab_check "A and B show the same key ID and fingerprint for the pair" lab_eq "$(keys_of b alpha)" "$(keys_of a beta)"
lab_check "the key ID is what both derive from the key" lab_eq "$id1" \
    "$(py "import hashlib,sys; print(1 + hashlib.sha256(b'fedgate peer key\0' + bytes.fromhex(sys.argv[1])).digest()[8] % 255)" "$K1")"
lab_check "announce a->b before the rotation" announced a 1.5.1
lab_check "announce b->a before the rotation" announced b 2.5.1
base_bad_a=$(drops a resolve_bad_mac) base_bad_b=$(drops b resolve_bad_mac)
base_unknown_a=$(drops a resolve_unknown_key) base_unknown_b=$(drops b resolve_unknown_key)

# Traffic through the whole rotation: a lookup of a beta process that does not exist every 100 ms,
# each a directed query to B and its answer, both signed; the status of each is one line.
(
    i=0
    while :; do
        i=$((i + 1))
        { node a resolve "2.77.$i" --json --timeout-ms 3000 2>/dev/null || true; } |
            /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['status'])" 2>/dev/null || echo failed
        sleep 0.1
    done
) >"$WORK/lookups" &
BG_PIDS+=($!)
LOOKUPS_PID=$!
lab_wait "lookups to start" grep -q not_found "$WORK/lookups"

# Step 1: both take the new key as next_key.
edit "$A_CONF" "key = \"$K1\"" "key = \"$K1\"
next_key = \"$K2\""
edit "$B_CONF" "key = \"$K1\"" "key = \"$K1\"
next_key = \"$K2\""
reload a && reload b
id2=$(keys_of a beta | sed 's/.* next:\([0-9]*\):.*/\1/')
lab_check "step 1: A shows the current and the next key" lab_eq "$(keys_of a beta | cut -d' ' -f1 | cut -d: -f1,2) $(keys_of a beta | cut -d' ' -f2 | cut -d: -f1,2)" "current:$id1 next:$id2"
lab_check "step 1: B shows the same IDs and fingerprints" lab_eq "$(keys_of b alpha)" "$(keys_of a beta)"
lab_check "step 1: announce a->b" announced a 1.5.2
lab_check "step 1: announce b->a" announced b 2.5.2
lab_check "step 1: beta's messages still come under the old key" lab_eq "$(last_key_of a beta)" "$id1"

# Step 2: A first, then B, make the new key current and keep the old one as next.
edit "$A_CONF" "key = \"$K1\"
next_key = \"$K2\"" "key = \"$K2\"
next_key = \"$K1\""
reload a
lab_check "step 2 (A moved): announce a->b under the new key" announced a 1.5.3
lab_check "step 2 (A moved): B sees alpha's messages under the new key" lab_eq "$(last_key_of b alpha)" "$id2"
lab_check "step 2 (A moved): announce b->a, still under the old key" announced b 2.5.3
lab_check "step 2 (A moved): beta's messages still under the old key" lab_eq "$(last_key_of a beta)" "$id1"
edit "$B_CONF" "key = \"$K1\"
next_key = \"$K2\"" "key = \"$K2\"
next_key = \"$K1\""
reload b
lab_check "step 2 (both moved): announce b->a under the new key" announced b 2.5.4
lab_check "step 2 (both moved): A sees beta's messages under the new key" lab_eq "$(last_key_of a beta)" "$id2"

# Step 3: both drop the old key.
edit "$A_CONF" "key = \"$K2\"
next_key = \"$K1\"" "key = \"$K2\""
edit "$B_CONF" "key = \"$K2\"
next_key = \"$K1\"" "key = \"$K2\""
reload a && reload b
lab_check "step 3: A holds the new key alone, as B does" lab_eq "$(keys_of b alpha)" "$(keys_of a beta)"
lab_check "step 3: and it is the next key of step 1" lab_eq "$(keys_of a beta | cut -d: -f1,2)" "current:$id2"
lab_check "step 3: announce a->b" announced a 1.5.5
lab_check "step 3: announce b->a" announced b 2.5.5
n0=$(wc -l <"$WORK/lookups")
lab_wait "more lookups after the rotation" bash -c "(( \$(wc -l <'$WORK/lookups') >= $n0 + 5 ))"
kill "$LOOKUPS_PID" 2>/dev/null || true
wait "$LOOKUPS_PID" 2>/dev/null || true
lookups=$(grep -c . "$WORK/lookups")
answered=$(grep -c '^not_found$' "$WORK/lookups" || true)
echo "     $lookups lookups during the rotation, $answered answered by B"
# The last line may be cut by the kill.
lab_check "every lookup during the rotation was answered by B (not_found)" lab_eq "$(head -n $((lookups - 1)) "$WORK/lookups" | sort -u | tr '\n' ' ')" "not_found "
lab_check "A dropped nothing as a bad MAC" lab_eq "$(drops a resolve_bad_mac)" "$base_bad_a"
lab_check "B dropped nothing as a bad MAC" lab_eq "$(drops b resolve_bad_mac)" "$base_bad_b"
lab_check "A dropped nothing for an unknown key ID" lab_eq "$(drops a resolve_unknown_key)" "$base_unknown_a"
lab_check "B dropped nothing for an unknown key ID" lab_eq "$(drops b resolve_unknown_key)" "$base_unknown_b"

# The retired key: a message under it names a key A no longer holds.
ip netns exec "$NS_JOIN" ip addr add 198.19.0.99/24 dev "${LAB_PREFIX}j-br"
forge() { ip netns exec "$NS_JOIN" /usr/bin/python3 "$HERE/peer_msg.py" --dst "$A_EXT_IP" --src "$B_EXT_IP" --party 2 "$@"; }
forge --key "$K1" --key-id "$id1" sync
lab_check "a message under the retired key is dropped as an unknown key ID" \
    lab_wait "unknown key drop" more_drops a resolve_unknown_key "$base_unknown_a"

# --- Flood: forged messages from beta's address while a mapping carries iperf3 ---
lab_ctl a map add import --cluster k1 --proto tcp --port 5201 --peer beta --peer-port 15201 >/dev/null
lab_ctl b map add export --cluster k1 --proto tcp --port 15201 --node "$B_NODE_IP:5201" >/dev/null
iperf() { # iperf NAME SECONDS — prints Mbit/s received through the mapping
    ip netns exec "$NS_B_NODE" iperf3 -s -B "$B_NODE_IP" -p 5201 -1 >"$WORK/$1-server.log" 2>&1 &
    local server=$!
    lab_wait "iperf3 server" bash -c "ip netns exec '$NS_B_NODE' ss -ltn | grep -q '$B_NODE_IP:5201'"
    ip netns exec "$NS_A_NODE" timeout 60 iperf3 -c "$A_IN_IP" -p 5201 -t "$2" -J >"$WORK/$1.json" || true
    wait "$server" 2>/dev/null || true
    py "import json,sys; r=json.load(open(sys.argv[1]))['end']['sum_received']; print(round(r['bits_per_second']/1e6, 1))" "$WORK/$1.json" 2>/dev/null || echo 0
}
before=$(iperf before 3)
checked0=$(drops a resolve_bad_mac) limited0=$(drops a resolve_peer_rate_limited)
FLOOD_S=6
forge --key "$K2" --key-id "$id2" --flood-s "$FLOOD_S" sync >"$WORK/flood.log" 2>&1 &
FLOOD_PID=$!
BG_PIDS+=($FLOOD_PID)
lab_wait "the flood to reach A" more_drops a resolve_peer_rate_limited "$limited0"
during=$(iperf during 3)
wait "$FLOOD_PID" || true
checked=$(( $(drops a resolve_bad_mac) - checked0 )) limited=$(( $(drops a resolve_peer_rate_limited) - limited0 ))
echo "     forwarding through the mapping: $before Mbit/s before the flood, $during Mbit/s during it"
echo "     $(cat "$WORK/flood.log"); A checked $checked MACs (budget ${VERIFY_RATE}/s, burst $VERIFY_BURST) and dropped $limited unchecked"
lab_check "the mapping kept forwarding during the flood" py "import sys; sys.exit(0 if float('$during') > 0 else 1)"
lab_check "A checked no more MACs than its budget allows in the flood's time" \
    py "import sys; sys.exit(0 if $checked <= $VERIFY_RATE * ($FLOOD_S + 2) + $VERIFY_BURST else 1)"
lab_check "A dropped most of the flood unchecked" py "import sys; sys.exit(0 if $limited > $checked else 1)"
lab_check "after the flood, announces still arrive" announced b 2.5.6

echo "keys.sh: $LAB_FAILURES failure(s)"
((LAB_FAILURES == 0))
