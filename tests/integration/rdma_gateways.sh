#!/usr/bin/env bash
# Integration: a real RDMA connection between two parties' namespaces through both gateways. Each
# node gets a soft-RoCE device (rdma_rxe) on its veth, so its RoCE v2 packets cross the gateways like
# any other: a process on node b listens with --transport rdma, one on node a connects by process ID
# and sends 64 MiB over RDMA WRITE; both compare SHA-256 digests, and both gateways' translations
# counted the packets. Where the kernel has no rdma_rxe (or iproute2 no `rdma`), it skips (exit 77)
# and says why. Cleans up on any exit.
# usage: rdma_gateways.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v rdma >/dev/null || { echo "SKIP: iproute2's rdma tool is missing"; exit 77; }
if ! modprobe rdma_rxe 2>/dev/null && [[ ! -d /sys/module/rdma_rxe ]]; then
    echo "SKIP: this kernel has no soft-RoCE (modprobe rdma_rxe failed); RoCE through the gateways is covered by"
    echo "      tests/integration/roce.sh (scapy packets) and the EAL tests"
    exit 77
fi

LAB_BUILD=$(realpath "${1:?usage: rdma_gateways.sh BUILD_DIR}")
LAB_PREFIX=h$((RANDOM % 1000))
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tools/lab.sh"
NODE=$LAB_BUILD/tools/fedgate-node
WORK=$(mktemp -d)
BG_PIDS=()
RXE=()
cleanup() {
    local p d
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    for d in "${RXE[@]}"; do rdma link delete "$d" 2>/dev/null || true; done
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT

lab_up
# A soft-RoCE device on each node's veth, created in the node's namespace.
for side in a b; do
    case $side in a) ns=$NS_A_NODE ifc=$A_NODE_IF ;; b) ns=$NS_B_NODE ifc=$B_NODE_IF ;; esac
    dev=${LAB_PREFIX}rxe$side
    if ! ip netns exec "$ns" rdma link add "$dev" type rxe netdev "$ifc"; then
        echo "SKIP: cannot add a soft-RoCE device on $ifc"
        exit 77
    fi
    RXE+=("$dev")
done

node() { # node a|b NAME ARGS... — fedgate-node in the background on that node, output in $WORK/NAME
    local side=$1 name=$2 ns gw ip
    shift 2
    case $side in a) ns=$NS_A_NODE gw=$A_IN_IP ip=$A_NODE_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ip=$B_NODE_IP ;; esac
    ip netns exec "$ns" "$NODE" --gateway "$gw" --bind "$ip" "$@" >"$WORK/$name" 2>&1 &
    BG_PIDS+=($!)
    LAST_PID=$!
}

node b listen listen --pid 2.7.70 --transport rdma
lab_wait "2.7.70 to listen" grep -q "listening 2.7.70" "$WORK/listen"
lab_wait "A to learn 2.7.70" lab_ctl a dir show 2.7.70
node a conn connect --pid 1.3.170 --to 2.7.70 --transport rdma --bytes 67108864 --hold
lab_wait "the 64 MiB connection to finish" grep -q "digest" "$WORK/conn"
sed 's/^/     /' "$WORK/conn"
lab_check "the connector sent 64 MiB over RDMA through both gateways and the digests match" \
    grep -Eq "^conn 0x[0-9a-f]+ to 2.7.70 roce_v2 .* digest ok$" "$WORK/conn"
lab_wait "the listener to report the connection" grep -q "from 1.3.170" "$WORK/listen"
lab_check "the listener got the bytes and the digests match" grep -Eq "from 1.3.170 roce_v2 .*digest ok$" "$WORK/listen"
translated_both() { # translated_both a|b — its one translation carried packets both ways
    [[ $(lab_json "$1" "int(len(r['translations']) == 1 and r['translations'][0]['to_peer']['packets'] > 0 and
                         r['translations'][0]['from_peer']['packets'] > 0)" conn list) == 1 ]]
}
lab_check "gateway A translated packets both ways" translated_both a
lab_check "gateway B translated packets both ways" translated_both b

echo
if ((LAB_FAILURES)); then
    echo "rdma_gateways: $LAB_FAILURES check(s) failed"
    exit 1
fi
echo "rdma_gateways: all checks passed"
