#!/usr/bin/env bash
# Integration: connections between compute processes of two parties, by process ID alone, through
# both gateways. A process on node a connects to one on node b over the tcp backend and sends
# 256 MiB; both sides compare SHA-256 digests. The automatic mappings the tcp transport needs exist
# while their processes live and are gone after they leave. A connect to an unregistered ID fails
# naming the stage; 100 connections at once between several process pairs all complete; asking for
# rdma where no device exists fails at stage transport. The tcp parts ask for tcp, so a host with an
# RDMA device (visible in every namespace) runs them the same. Cleans up on any exit.
# usage: connect.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: connect.sh BUILD_DIR}")
LAB_PREFIX=k$((RANDOM % 1000))
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

# node_of a|b — sets NS, GW and IP: that party's node namespace, gateway and node address.
node_of() { case $1 in a) NS=$NS_A_NODE GW=$A_IN_IP IP=$A_NODE_IP ;; b) NS=$NS_B_NODE GW=$B_IN_IP IP=$B_NODE_IP ;; esac; }
# in_node a|b ARGS... — fedgate-node on that party's node, against its gateway, from its address.
in_node() {
    node_of "$1"
    shift
    ip netns exec "$NS" "$NODE" --gateway "$GW" --bind "$IP" "$@"
}
background() { # background NAME a|b ARGS... — the same in the background, output in $WORK/NAME
    local name=$1
    node_of "$2"
    shift 2
    # Not through a function: `ip netns exec` execs fedgate-node, so $! is fedgate-node itself and
    # SIGTERM reaches it.
    ip netns exec "$NS" "$NODE" --gateway "$GW" --bind "$IP" "$@" >"$WORK/$name" 2>&1 &
    NODE_PIDS+=($!)
    LAST_PID=$!
}
auto_maps() { lab_json "$1" "len([m for m in r['${2}s'] if m['source'] == 'auto'])" map list; }
no_auto_maps() { [[ $(auto_maps "$1" "$2") == 0 ]]; }
exports_are() { [[ $(auto_maps "$1" export) == "$2" ]]; }
handshakes() { lab_json "$1" "r['resolution']['handshakes']['$2']" stats; }

lab_edit_configs() {
    # Short heartbeats, so that a process that leaves without a word is gone quickly; finished
    # handshakes listed for 10 minutes, so a slow (sanitized, loaded) 256 MiB transfer still finds
    # its handshake in `conn list` afterwards.
    local f
    for f in "$A_CONF" "$B_CONF"; do
        printf '\n[resolve]\nheartbeat_ms = 250\nheartbeat_timeout_ms = 4000\n[connect]\nhandshake_timeout_ms = 600000\n' >>"$f"
    done
}
lab_up

# --- a listener on node b: registered, its tcp endpoint exported automatically ---
background listen42 b listen --pid 2.7.42 --transport tcp
LISTENER=$LAST_PID
lab_wait "2.7.42 to listen" grep -q "^listening 2.7.42" "$WORK/listen42"
lab_check "B exported 2.7.42's tcp endpoint automatically" lab_eq "$(auto_maps b export)" 1
lab_check "the export delivers to node b's listening port" lab_eq \
    "$(lab_json b "[m['node'] for m in r['exports'] if m['source'] == 'auto'][0]" map list)" \
    "$B_NODE_IP:$(sed -n 's/^listening 2.7.42 epoch [0-9]* tcp port \([0-9]*\)$/\1/p' "$WORK/listen42")"
lab_wait "A to learn 2.7.42 from B's announce" lab_ctl a dir show 2.7.42

# --- 256 MiB from a process of party alpha, by ID alone ---
background conn256 a connect --pid 1.3.100 --to 2.7.42 --bytes 268435456 --transport tcp --hold
CONNECTOR=$LAST_PID
lab_wait "the 256 MiB connection to finish" grep -q "digest" "$WORK/conn256"
lab_check "the connector sent 256 MiB over tcp and the digests match" \
    grep -Eq "^conn 0x[0-9a-f]+ to 2.7.42 tcp setup [0-9]+ us 268435456 bytes .* digest ok$" "$WORK/conn256"
lab_wait "the listener to report the connection" grep -q "^conn .* from 1.3.100" "$WORK/listen42"
lab_check "the listener got 256 MiB from 1.3.100 and the digests match" \
    grep -Eq "^conn 0x[0-9a-f]+ from 1.3.100 tcp 268435456 bytes .* digest ok$" "$WORK/listen42"
lab_check "A imported B's exported port automatically while 1.3.100 lives" lab_eq "$(auto_maps a import)" 1
lab_check "A lists the handshake as outbound, established, tcp" lab_eq \
    "$(lab_json a "' '.join([h['role'], h['stage'], h['transport']]) if (h := r['handshakes'][0]) else ''" conn list)" \
    "outbound established tcp"
lab_check "B lists it as inbound, established" lab_eq \
    "$(lab_json b "' '.join([h['role'], h['stage']]) if (h := r['handshakes'][0]) else ''" conn list)" "inbound established"
lab_check "fedgatectl conn list shows it" bash -c "'$LAB_BUILD/tools/fedgatectl' --socket '$A_SOCK' conn list | grep -q 'outbound .*established'"
kill -TERM "$CONNECTOR"
wait "$CONNECTOR" || true
lab_check "A's import goes when the last process that used it leaves" lab_wait "A's import to go" no_auto_maps a import

# --- refusals name their stage ---
out=$(in_node a connect --pid 1.3.101 --to 2.9.9 --bytes 1 2>&1 || true)
lab_check "a connect to an unregistered ID fails at stage resolve" \
    grep -q "connect 2.9.9: stage resolve: " <<<"$out"
probe_rc=0
"$LAB_BUILD/drivers/fedgate_verbs_probe" >/dev/null 2>&1 || probe_rc=$?
if ((probe_rc == 3)); then
    out=$(in_node a connect --pid 1.3.102 --to 2.7.42 --bytes 1 --transport rdma 2>&1 || true)
    echo "     $out"
    lab_check "--transport rdma with no RDMA device fails at stage transport, naming why" \
        grep -q "stage transport: .*no RDMA device" <<<"$out"
else
    echo "     (an RDMA device exists: the no-device refusal is not checked; tests/integration/rdma_gateways.sh covers RDMA)"
fi
out=$(in_node a connect --pid 2.3.103 --to 2.7.42 --bytes 1 2>&1 || true)
lab_check "an ID of another party cannot register to connect" grep -qi "wrong_party" <<<"$out"

# --- 100 connections at once between several process pairs ---
background listen43 b listen --pid 2.7.43 --transport tcp
LISTENER43=$LAST_PID
lab_wait "2.7.43 to listen" grep -q "^listening 2.7.43" "$WORK/listen43"
lab_wait "A to learn 2.7.43" lab_ctl a dir show 2.7.43
BATCH=()
for i in 0 1 2 3; do
    background "many$i" a connect --pid "1.4.$((110 + i))" --to "2.7.$((42 + i % 2))" --bytes 65536 --parallel 25 \
        --transport tcp --json
    BATCH+=($LAST_PID)
done
batch_ok=0
for p in "${BATCH[@]}"; do wait "$p" && batch_ok=$((batch_ok + 1)); done
lab_check "4 connector processes of 25 connections each all exit 0" lab_eq "$batch_ok" 4
lab_check "100 connections completed with matching digests" lab_eq "$(python3 - "$WORK"/many? <<'PY'
import json, sys
ok = 0
for path in sys.argv[1:]:
    text = open(path).read()
    start = text.find("\n[") + 1 if not text.startswith("[") else 0  # stderr lines may come first
    conns, _ = json.JSONDecoder().raw_decode(text[start:])
    ok += sum(1 for c in conns if c.get("digest") == "ok")
print(ok)
PY
)" 100
lab_check "B relayed at least 101 established handshakes" \
    python3 -c "import sys; sys.exit(int('$(handshakes b established)') < 101)"

# --- the target leaves: its export on B, and the import of it on A, go ---
background hold43 a connect --pid 1.3.120 --to 2.7.43 --bytes 1 --transport tcp --hold
HOLDER=$LAST_PID
lab_wait "the connection to 2.7.43" grep -q "digest" "$WORK/hold43"
lab_check "A imports 2.7.43's exported port while both processes live" lab_eq "$(auto_maps a import)" 1
kill -TERM "$LISTENER"
wait "$LISTENER" || true
lab_check "B's export of 2.7.42 goes when it deregisters" lab_wait "one export left" exports_are b 1
kill -TERM "$LISTENER43"
wait "$LISTENER43" || true
lab_check "B exports nothing once 2.7.43 has left too" lab_wait "no export left" exports_are b 0
lab_check "A's import of 2.7.43 goes when B withdraws it, while 1.3.120 still lives" \
    lab_wait "A's import to go" no_auto_maps a import
lab_check "1.3.120 is still running" kill -0 "$HOLDER"

echo
if ((LAB_FAILURES)); then
    echo "connect: $LAB_FAILURES check(s) failed"
    exit 1
fi
echo "connect: all checks passed"
