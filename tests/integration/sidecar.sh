#!/usr/bin/env bash
# Integration: programs that cannot change, joined by process ID through both gateways with
# fedgate-node's sidecar. A Python gRPC server listens on 127.0.0.1 in one party's node namespace
# behind `fedgate-node expose`; in the other party's node namespace `fedgate-node forward` offers it
# on a local port, and an unchanged gRPC client there makes a unary call and a bidirectional stream
# of a few MiB each way (SHA-256 checked by both ends). Then the same the other way round. No mapping
# is configured by hand: the tcp transport's automatic mappings carry it, and go when the sidecars
# do. A forward to an unregistered ID closes the client's socket and names stage resolve. Waits on
# readiness lines and listening ports only. Cleans up on any exit.
# usage: sidecar.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
PY=/usr/bin/python3
"$PY" -c 'import grpc' 2>/dev/null || { echo "SKIP: $PY has no grpc module (Debian package python3-grpcio)"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: sidecar.sh BUILD_DIR}")
LAB_PREFIX=s$((RANDOM % 1000))
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tools/lab.sh"
NODE=$LAB_BUILD/tools/fedgate-node
GRPC=$HERE/grpc_echo.py
STREAM_MIB=4
WORK=$(mktemp -d)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # Only these: a bare `wait` would also wait for the gateways, which lab_down stops.
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT

# node_of a|b — sets NS, GW and IP: that party's node namespace, gateway and node address.
node_of() { case $1 in a) NS=$NS_A_NODE GW=$A_IN_IP IP=$A_NODE_IP ;; b) NS=$NS_B_NODE GW=$B_IN_IP IP=$B_NODE_IP ;; esac; }
# background NAME a|b CMD... — CMD in that party's node namespace, output in $WORK/NAME; sets LAST_PID.
# `ip netns exec` execs CMD, so $! is CMD itself and SIGTERM reaches it.
background() {
    local name=$1
    node_of "$2"
    shift 2
    ip netns exec "$NS" "$@" >"$WORK/$name" 2>&1 &
    BG_PIDS+=($!)
    LAST_PID=$!
}
# sidecar NAME a|b ARGS... — fedgate-node ARGS in the background against that party's gateway.
sidecar() {
    local name=$1 party=$2
    shift 2
    node_of "$party"
    background "$name" "$party" "$NODE" --gateway "$GW" --bind "$IP" "$@"
}
in_node() { node_of "$1"; shift; ip netns exec "$NS" "$@"; }
listening() { in_node "$1" ss -Hltn "sport = :$2" | grep -q .; }  # listening a|b PORT
# stop_sidecar PID NAME — SIGTERM, and the exit status in $WORK/NAME.rc
stop_sidecar() { local rc=0; kill -TERM "$1" 2>/dev/null || true; wait "$1" || rc=$?; echo "$rc" >"$WORK/$2.rc"; }
maps() { lab_json "$1" "len([m for m in r['${2}s'] if (m['source'] == 'auto') == ('$3' == 'auto')])" map list; }
maps_are() { [[ $(maps "$1" "$2" "$3") == "$4" ]]; }  # maps_are a|b import|export auto|manual N

lab_up
# What the topology configured before any sidecar ran: it must stay exactly that.
for g in a b; do for kind in import export; do
    eval "MANUAL_${g}_${kind}=$(maps $g $kind manual)"
done; done

# one_way SERVER_PARTY CLIENT_PARTY SERVER_ID FORWARDER_ID SERVER_PORT FORWARD_PORT
one_way() {
    local sp=$1 cp=$2 sid=$3 fid=$4 sport=$5 fport=$6
    local tag="$sp$cp"
    echo "# a gRPC server on node $sp (127.0.0.1:$sport) as $sid; its client on node $cp via 127.0.0.1:$fport"
    background "server-$tag" "$sp" "$PY" "$GRPC" serve "127.0.0.1:$sport"
    lab_wait "the gRPC server on node $sp" listening "$sp" "$sport"
    sidecar "expose-$tag" "$sp" expose --pid "$sid" --to "127.0.0.1:$sport" --transport tcp
    EXPOSE=$LAST_PID
    lab_wait "expose to be ready" grep -qx "exposing $sid to 127.0.0.1:$sport" "$WORK/expose-$tag"
    lab_wait "gateway $cp to learn $sid" lab_ctl "$cp" dir show "$sid"
    sidecar "forward-$tag" "$cp" forward --listen "127.0.0.1:$fport" --to "$sid" --pid "$fid" --transport tcp
    FORWARD=$LAST_PID
    lab_wait "forward to be ready" grep -qx "forwarding 127.0.0.1:$fport to $sid" "$WORK/forward-$tag"
    lab_check "forward listens on node $cp's 127.0.0.1:$fport" listening "$cp" "$fport"

    lab_check "a unary gRPC call from node $cp reaches node $sp's server through both sidecars" lab_eq \
        "$(in_node "$cp" timeout 60 "$PY" "$GRPC" call "127.0.0.1:$fport" "hello from node $cp" 2>&1)" \
        "echo: hello from node $cp"
    lab_check "a bidirectional gRPC stream moves $STREAM_MIB MiB each way, digests equal at both ends" lab_eq \
        "$(in_node "$cp" timeout 120 "$PY" "$GRPC" stream "127.0.0.1:$fport" "$STREAM_MIB" 2>&1)" \
        "stream $((STREAM_MIB << 20)) bytes each way, digests match"
    # Each client process opened one connection; it ends as the client exits, and both sidecars say so.
    local forwarder_re=${fid//./\\.} server_re=${sid//./\\.}
    lab_wait "forward's lines for both connections" \
        bash -c "(( \$(grep -cE '^conn 0x[0-9a-f]{16} 127\\.0\\.0\\.1:[0-9]+ <-> $server_re tcp: ' '$WORK/forward-$tag') >= 2 ))"
    lab_wait "expose's lines for both connections" \
        bash -c "(( \$(grep -cE '^conn 0x[0-9a-f]{16} $forwarder_re <-> 127\\.0\\.0\\.1:$sport tcp: ' '$WORK/expose-$tag') >= 2 ))"
    lab_check "forward counted more than $STREAM_MIB MiB each way on one connection, with no error" "$PY" - \
        "$WORK/forward-$tag" "$STREAM_MIB" <<'PY'
import re, sys
mib = int(sys.argv[2]) << 20
lines = [l for l in open(sys.argv[1]) if l.startswith("conn ")]
big = [l for l in lines if (m := re.search(r": (\d+) bytes \S+ -> \S+, (\d+) bytes", l))
       and int(m[1]) > mib and int(m[2]) > mib]
sys.exit(0 if big and not any("ended:" in l for l in lines) else 1)
PY
    lab_check "gateway $sp exported $sid's tcp endpoint automatically" maps_are "$sp" export auto 1
    lab_check "gateway $cp imported it automatically for $fid" maps_are "$cp" import auto 1

    stop_sidecar "$FORWARD" "forward-$tag"
    stop_sidecar "$EXPOSE" "expose-$tag"
    lab_check "forward exits 0 on SIGTERM" lab_eq "$(cat "$WORK/forward-$tag.rc")" 0
    lab_check "expose exits 0 on SIGTERM" lab_eq "$(cat "$WORK/expose-$tag.rc")" 0
    lab_check "forward's summary: 2 connections, 0 failed" \
        grep -qx "fedgate-node: forward 127.0.0.1:$fport to $sid: 2 connections, 0 failed" "$WORK/forward-$tag"
    lab_check "expose's summary: 2 connections, 0 failed" \
        grep -qx "fedgate-node: expose $sid: 2 connections, 0 failed" "$WORK/expose-$tag"
    lab_check "gateway $sp's automatic export goes with the sidecar" lab_wait "no export on $sp" maps_are "$sp" export auto 0
    lab_check "gateway $cp's automatic import goes too" lab_wait "no import on $cp" maps_are "$cp" import auto 0
}

one_way b a 2.7.50 1.3.60 50051 6000
one_way a b 1.3.51 2.7.61 50052 6001

echo "# a forward to an ID nobody registered"
sidecar forward-nobody a forward --listen 127.0.0.1:6002 --to 2.7.99 --pid 1.3.62 --transport tcp
NOBODY=$LAST_PID
lab_wait "forward to be ready" grep -qx "forwarding 127.0.0.1:6002 to 2.7.99" "$WORK/forward-nobody"
# A client that connects and reads: the sidecar's close of its socket ends the read.
lab_check "the client's socket is closed" in_node a timeout 30 "$PY" -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", 6002), timeout=25)
try:
    sys.exit(0 if s.recv(1) == b"" else 1)
except ConnectionResetError:
    sys.exit(0)'
lab_check "forward names stage resolve" lab_wait "the failure to be said" \
    grep -qE "^fedgate-node: forward: connect 2\.7\.99: stage resolve: .*; closed the local connection from 127\.0\.0\.1:[0-9]+$" \
    "$WORK/forward-nobody"
stop_sidecar "$NOBODY" forward-nobody
lab_check "its summary counts the failure" \
    grep -qx "fedgate-node: forward 127.0.0.1:6002 to 2.7.99: 0 connections, 1 failed" "$WORK/forward-nobody"

for g in a b; do for kind in import export; do
    want=MANUAL_${g}_${kind}
    lab_check "gateway $g's ${kind}s configured by hand are as the topology made them (${!want})" \
        maps_are "$g" "$kind" manual "${!want}"
done; done

echo
if ((LAB_FAILURES)); then
    for f in "$WORK"/*; do echo "--- $(basename "$f")"; tail -n 20 "$f"; done
    echo "sidecar: $LAB_FAILURES check(s) failed"
    exit 1
fi
echo "sidecar: all checks passed"
