#!/usr/bin/env bash
# tools/demo.sh — the README's first command: installs what is missing, builds fedgate, builds the
# two-party topology in network namespaces, starts both gateways and shows real traffic crossing them.
set -euo pipefail

usage() {
    cat <<'TXT'
usage: tools/demo.sh [--keep] [--prefix P] [--build-dir DIR]

Runs fedgate's main job on the embedded two-party topology (tools/topo.sh --help
shows the picture): installs packages with apt-get if missing, builds (Release),
starts gateway A (party alpha) and B (party beta) in their namespaces, then
  - node a pings its gateway's internal and external addresses,
  - gateway A pings gateway B across the joining network (and back),
  - port map: A's internal port 8080 -> B's external port 9000 -> node b:8000
    (python3 http.server), fetched with curl from node a; iperf3 TCP the same way,
  - address resolution: a process on node b registers, node a resolves it,
  - a connection by process ID over the tcp backend (64 MiB, digests compared),
  - RDMA between parties: a handshake without a device (fedgate-node --handshake-only),
    then RoCE v2 packets from node a (scapy) translated by both gateways to node b,
  - prints fedgatectl status and stats of both gateways.
Everything is torn down at the end, unless --keep leaves the gateways running
(stop them later with: tools/topo.sh --prefix P down).

  --keep           leave the topology and both gateways running
  --prefix P       namespace/interface prefix (default dm)
  --build-dir DIR  CMake build directory (default build)
TXT
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KEEP=0
LAB_PREFIX=dm
LAB_BUILD=$ROOT/build
while (($#)); do
    case $1 in
    --keep) KEEP=1 ;;
    --prefix) LAB_PREFIX=${2:?--prefix needs a value}; shift ;;
    --build-dir) LAB_BUILD=$(realpath -m "${2:?--build-dir needs a value}"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $(id -u) -eq 0 ]] || { echo "demo.sh: run as root (network namespaces, DPDK)" >&2; exit 1; }

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "dependencies"
"$ROOT/tools/deps.sh"
step "build ($LAB_BUILD)"
cmake -S "$ROOT" -B "$LAB_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$LAB_BUILD" --target fedgated fedgatectl fedgate-node

# shellcheck source=tools/lab.sh
source "$ROOT/tools/lab.sh"
((KEEP)) || trap lab_down EXIT
step "topology $LAB_PREFIX and both gateways"
lab_up
lab_ctl a status
echo
lab_ctl b status

step "node a -> its gateway's internal address $A_IN_IP and external address $A_EXT_IP"
ip netns exec "$NS_A_NODE" ping -c 3 -i 0.2 -W 2 "$A_IN_IP"
ip netns exec "$NS_A_NODE" ping -c 3 -i 0.2 -W 2 "$A_EXT_IP"
step "node b -> its gateway $B_IN_IP"
ip netns exec "$NS_B_NODE" ping -c 3 -i 0.2 -W 2 "$B_IN_IP"
step "gateway A -> gateway B across the joining network, and back"
lab_ctl a ping "$B_EXT_IP" --count 3
lab_ctl b ping "$A_EXT_IP" --count 3

step "port map: node a dials A's mapped port 8080; B delivers it to node b's port 8000"
lab_ctl a map add import --cluster demo --proto tcp --port 8080 --peer beta --peer-port 9000
lab_ctl b map add export --cluster demo --proto tcp --port 9000 --node "$B_NODE_IP:8000" --allow-party alpha
lab_ctl a map add import --cluster demo --proto tcp --port 5201 --peer beta --peer-port 15201
lab_ctl b map add export --cluster demo --proto tcp --port 15201 --node "$B_NODE_IP:5201" --allow-party alpha
WWW=$(mktemp -d)
echo "hello from node b ($B_NODE_IP), party beta" >"$WWW/index.html"
ip netns exec "$NS_B_NODE" python3 -m http.server 8000 --bind "$B_NODE_IP" --directory "$WWW" >/dev/null 2>&1 &
ip netns exec "$NS_B_NODE" iperf3 -s -B "$B_NODE_IP" -p 5201 -1 >/dev/null 2>&1 &
http_up() { ip netns exec "$NS_B_NODE" curl -s -m 1 "http://$B_NODE_IP:8000/" >/dev/null; }
lab_wait "node b's web server" http_up
echo "\$ curl http://$A_IN_IP:8080/   (in node a)"
ip netns exec "$NS_A_NODE" curl -sS -m 5 "http://$A_IN_IP:8080/"
echo "\$ iperf3 -c $A_IN_IP -p 5201 -t 3   (in node a)"
ip netns exec "$NS_A_NODE" iperf3 -c "$A_IN_IP" -p 5201 -t 3 | tail -4
lab_ctl a map list
echo
lab_ctl a session list
echo
lab_ctl b session list
rm -rf "$WWW"

step "address resolution: a process on node b registers as 2.7.42; a process on node a resolves it"
NODE=$LAB_BUILD/tools/fedgate-node
REG_OUT=$(mktemp)
# `ip netns exec` execs fedgate-node, so the PID is the process: SIGTERM makes it deregister.
ip netns exec "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" register --pid 2.7.42 --transport tcp \
    --listen "$B_NODE_IP:5000" >"$REG_OUT" 2>&1 &
REG_PID=$!
lab_wait "node b's process to register" grep -q '^registered' "$REG_OUT"
echo "\$ fedgate-node --gateway $B_IN_IP register --pid 2.7.42 --transport tcp --listen $B_NODE_IP:5000   (in node b)"
cat "$REG_OUT"
announced() { lab_ctl a dir show 2.7.42; }
lab_wait "gateway B's announce to reach A" announced
echo "\$ fedgate-node --gateway $A_IN_IP resolve 2.7.42   (in node a: B announced it, A answers from its cache)"
ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" resolve 2.7.42
echo "\$ fedgate-node --gateway $A_IN_IP resolve 0.7.42   (in node a: owner unknown, so A broadcasts)"
ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" resolve 0.7.42
echo "\$ fedgate-node --gateway $A_IN_IP resolve 2.7.99   (nobody holds it)"
ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" resolve 2.7.99 || true
echo
lab_ctl b dir list
echo
lab_ctl a dir list
kill -TERM "$REG_PID"
wait "$REG_PID" || true
rm -f "$REG_OUT"

step "connection by process ID: a process on node a connects to 2.7.50 on node b and sends 64 MiB"
LISTEN_OUT=$(mktemp)
ip netns exec "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" --bind "$B_NODE_IP" listen --pid 2.7.50 >"$LISTEN_OUT" 2>&1 &
LISTEN_PID=$!
lab_wait "node b's process to listen" grep -q '^listening' "$LISTEN_OUT"
echo "\$ fedgate-node --gateway $B_IN_IP --bind $B_NODE_IP listen --pid 2.7.50   (in node b)"
cat "$LISTEN_OUT"
lab_wait "gateway B's announce of 2.7.50 to reach A" lab_ctl a dir show 2.7.50
echo "\$ fedgate-node --gateway $A_IN_IP --bind $A_NODE_IP connect --pid 1.3.100 --to 2.7.50 --bytes 67108864   (in node a)"
ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" --bind "$A_NODE_IP" connect --pid 1.3.100 --to 2.7.50 \
    --bytes 67108864
lab_wait "the listener to report it" grep -q '^conn ' "$LISTEN_OUT"
echo "node b's listener:"
grep '^conn ' "$LISTEN_OUT"
echo
echo "the handshake as each gateway relayed it (REQ/REP/RTU), and the mappings B made for 2.7.50's tcp endpoint:"
lab_ctl a conn list
lab_ctl b conn list
lab_ctl b map list --cluster auto
kill -TERM "$LISTEN_PID"
wait "$LISTEN_PID" || true
rm -f "$LISTEN_OUT"

step "RDMA between parties: a handshake without a device, then RoCE v2 packets through both gateways"
# No RDMA device here: fedgate-node runs the RDMA handshake with given QP values and prints what its
# QP would be told; scapy then sends RC packets to exactly that, and a sniffer on node b sees them
# arrive at node b's real address and QP number with an ICRC scapy accepts.
LISTEN_OUT=$(mktemp) CONN_OUT=$(mktemp) SNIFF_OUT=$(mktemp)
ip netns exec "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" --bind "$B_NODE_IP" listen --pid 2.7.60 --transport rdma \
    --handshake-only --qpn 0x4567 --psn 0x10 --json >"$LISTEN_OUT" 2>&1 &
LISTEN_PID=$!
lab_wait "node b's RDMA process to listen" grep -q 'listening 2.7.60' "$LISTEN_OUT"
lab_wait "gateway B's announce of 2.7.60 to reach A" lab_ctl a dir show 2.7.60
echo "\$ fedgate-node ... connect --pid 1.3.160 --to 2.7.60 --transport rdma --handshake-only --qpn 0x123 --psn 0x20 --json   (in node a)"
ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" --bind "$A_NODE_IP" connect --pid 1.3.160 --to 2.7.60 \
    --transport rdma --handshake-only --qpn 0x123 --psn 0x20 --json --hold >"$CONN_OUT" 2>&1 &
CONN_PID=$!
lab_wait "node a's handshake" grep -q '^{' "$CONN_OUT"
grep '^{' "$CONN_OUT"
echo "(node a is told its own gateway's internal address and a virtual QPN; node b, in turn:)"
lab_wait "node b's side" grep -q '^{' "$LISTEN_OUT"
grep '^{' "$LISTEN_OUT"
PEER_QPN=$(grep '^{' "$CONN_OUT" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["peer_qpn"])')
b_translates() { lab_ctl b conn list --json | grep -q node_qpn; }
lab_wait "gateway B's translation" b_translates
ip netns exec "$NS_B_NODE" /usr/bin/python3 "$ROOT/tools/roce_pkts.py" sniff --iface "$B_NODE_IF" --count 4 \
    --src "$B_IN_IP" --dst "$B_NODE_IP" --dqpn 0x4567 >"$SNIFF_OUT" 2>&1 &
SNIFF_PID=$!
lab_wait "the sniffer on node b" grep -q '^ready' "$SNIFF_OUT"
echo "\$ roce_pkts.py send --src $A_NODE_IP --dst $A_IN_IP --dqpn $PEER_QPN   (in node a: SEND, RDMA WRITE, ACK, CNP)"
ip netns exec "$NS_A_NODE" /usr/bin/python3 "$ROOT/tools/roce_pkts.py" send --iface "$A_NODE_IF" --src "$A_NODE_IP" \
    --dst "$A_IN_IP" --dqpn "$PEER_QPN"
wait "$SNIFF_PID" || true
echo "what node b received:"
grep -v '^ready' "$SNIFF_OUT"
echo
lab_ctl a conn list
kill -TERM "$CONN_PID" "$LISTEN_PID"
wait "$CONN_PID" "$LISTEN_PID" || true
rm -f "$LISTEN_OUT" "$CONN_OUT" "$SNIFF_OUT"

step "gateway A stats"
lab_ctl a stats
step "gateway B stats"
lab_ctl b stats

if ((KEEP)); then
    step "left running: fedgatectl --socket $A_SOCK status; stop with tools/topo.sh --prefix $LAB_PREFIX down"
else
    step "teardown"
    lab_down
    trap - EXIT
    echo "gateway exit codes: A=$LAB_RC_A B=$LAB_RC_B"
    [[ $LAB_RC_A == 0 && $LAB_RC_B == 0 ]]
fi
