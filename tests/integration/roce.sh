#!/usr/bin/env bash
# Integration: RoCE v2 between two parties through both gateways, without an RDMA device. fedgate-node
# runs the RDMA handshake with --handshake-only (given QPNs and PSNs); each side must be told its own
# gateway's internal address and a virtual QPN, and the clamped MTU. Then scapy (Debian's
# python3-scapy) sends RC packets (SEND, RDMA WRITE with RETH, ACK, CNP) from node a to what node a
# was told, and a sniffer on node b checks that they arrive addressed to node b's real address and
# QPN with an ICRC scapy computes the same; the same the other way. An unknown QPN, a spoofed node
# and an outsider on the external side are dropped and counted; the translations go when the
# processes leave. Cleans up on any exit.
# usage: roce.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
/usr/bin/python3 -c "import scapy.contrib.roce" 2>/dev/null || { echo "SKIP: python3-scapy is not installed"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: roce.sh BUILD_DIR}")
LAB_PREFIX=r$((RANDOM % 1000))
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tools/lab.sh"
NODE=$LAB_BUILD/tools/fedgate-node
PKTS=$HERE/../../tools/roce_pkts.py
WORK=$(mktemp -d)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT

node_of() { case $1 in a) NS=$NS_A_NODE GW=$A_IN_IP IP=$A_NODE_IP ;; b) NS=$NS_B_NODE GW=$B_IN_IP IP=$B_NODE_IP ;; esac; }
background() { # background NAME a|b ARGS... — fedgate-node on that party's node, output in $WORK/NAME
    local name=$1
    node_of "$2"
    shift 2
    ip netns exec "$NS" "$NODE" --gateway "$GW" --bind "$IP" "$@" >"$WORK/$name" 2>&1 &
    BG_PIDS+=($!)
    LAST_PID=$!
}
# field FILE KEY — KEY of the first JSON object line of FILE
field() { /usr/bin/python3 -c "
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{'):
        print(json.loads(line)[sys.argv[2]]); break
" "$1" "$2"; }
has_json() { grep -q '^{' "$1"; }
drops() { lab_json "$1" "r['drops_by_reason']['$2']" stats; }
drops_reach() { (($(drops "$1" "$2") >= $3)); }  # drops_reach a|b REASON N
translations() { lab_json "$1" "len(r['translations'])" conn list; }
tr_field() { lab_json "$1" "r['translations'][0]['$2']" conn list; }
no_translations() { [[ $(translations "$1") == 0 ]]; }
one_translation() { [[ $(translations "$1") == 1 ]]; }
pkts() { ip netns exec "$1" /usr/bin/python3 "$PKTS" "${@:2}"; }

lab_edit_configs() {
    local f
    for f in "$A_CONF" "$B_CONF"; do printf '\n[resolve]\nheartbeat_ms = 250\nheartbeat_timeout_ms = 4000\n' >>"$f"; done
}
lab_up

# --- the handshake, with no RDMA device ---
QA=0x123 QB=0x4567
background listen b listen --pid 2.7.60 --transport rdma --handshake-only --qpn $QB --psn 0x10 --mtu 4096 --json
LISTENER=$LAST_PID
lab_wait "2.7.60 to listen" grep -q "listening 2.7.60" "$WORK/listen"
lab_wait "A to learn 2.7.60" lab_ctl a dir show 2.7.60
background conn a connect --pid 1.3.160 --to 2.7.60 --transport rdma --handshake-only --qpn $QA --psn 0x20 \
    --mtu 4096 --json --hold
CONNECTOR=$LAST_PID
lab_wait "the connector to print its QP's path" has_json "$WORK/conn"
lab_wait "the listener to print its QP's path" has_json "$WORK/listen"
cat "$WORK/conn" "$WORK/listen" | sed 's/^/     /'
A_QPN=$(field "$WORK/conn" peer_qpn)
B_QPN=$(field "$WORK/listen" peer_qpn)
lab_check "node a is told its own gateway's internal address" lab_eq "$(field "$WORK/conn" peer_gid)" "::ffff:$A_IN_IP"
lab_check "node b is told its own gateway's internal address" lab_eq "$(field "$WORK/listen" peer_gid)" "::ffff:$B_IN_IP"
lab_check "the PSNs pass through the gateways" lab_eq "$(field "$WORK/conn" peer_psn) $(field "$WORK/listen" peer_psn)" "16 32"
lab_check "the RDMA MTU is clamped to what 1500-byte ports carry" lab_eq \
    "$(field "$WORK/conn" mtu) $(field "$WORK/listen" mtu)" "1024 1024"
lab_check "neither node learns the other's real QPN" bash -c "[[ $A_QPN != $((QB)) && $B_QPN != $((QA)) ]]"
lab_check "both conn_ids agree" lab_eq "$(field "$WORK/conn" conn_id)" "$(field "$WORK/listen" conn_id)"
lab_wait "A to install the translation" one_translation a
lab_wait "B to install the translation" one_translation b
lab_check "A's translation: node a's real QPN behind the vQPN node a was told" lab_eq \
    "$(tr_field a node) $(tr_field a node_qpn) $(tr_field a internal_vqpn)" "$A_NODE_IP $((QA)) $A_QPN"
lab_check "B's translation: node b's real QPN behind the vQPN node b was told" lab_eq \
    "$(tr_field b node) $(tr_field b node_qpn) $(tr_field b internal_vqpn)" "$B_NODE_IP $((QB)) $B_QPN"
lab_check "each gateway sends to the other's external vQPN" lab_eq \
    "$(tr_field a peer_vqpn) $(tr_field b peer_vqpn)" "$(tr_field b external_vqpn) $(tr_field a external_vqpn)"
lab_check "fedgatectl conn list shows the translation" bash -c \
    "'$LAB_BUILD/tools/fedgatectl' --socket '$A_SOCK' conn list | grep -q 'RoCE v2 translations'"

# --- node a -> node b: SEND, WRITE with RETH, ACK, CNP ---
# through() FROM_NS FROM_IF FROM_IP TO_GW QPN  TO_NS TO_IF TO_IP TO_GW_IN REAL_QPN NAME
through() {
    local name=${11}
    pkts "$6" sniff --iface "$7" --count 4 --src "$9" --dst "$8" --dqpn "${10}" --timeout 30 >"$WORK/$name" 2>&1 &
    local sniffer=$!
    BG_PIDS+=($sniffer)
    lab_wait "the sniffer on $7" grep -q "^ready" "$WORK/$name"
    pkts "$1" send --iface "$2" --src "$3" --dst "$4" --dqpn "$5" >/dev/null
    local rc=0
    wait "$sniffer" || rc=$?
    sed 's/^/     /' "$WORK/$name"
    return $rc
}
lab_check "SEND, WRITE, ACK and CNP from node a reach node b's real address and QPN with a good ICRC" \
    through "$NS_A_NODE" "$A_NODE_IF" "$A_NODE_IP" "$A_IN_IP" "$A_QPN" "$NS_B_NODE" "$B_NODE_IF" "$B_NODE_IP" "$B_IN_IP" $((QB)) a2b
lab_check "ECN (ECT(0)) arrived unchanged" bash -c "grep -c '\"tos\": 2' '$WORK/a2b' | grep -qx 4"
lab_check "and the other way, from node b to node a's real address and QPN" \
    through "$NS_B_NODE" "$B_NODE_IF" "$B_NODE_IP" "$B_IN_IP" "$B_QPN" "$NS_A_NODE" "$A_NODE_IF" "$A_NODE_IP" "$A_IN_IP" $((QA)) b2a
lab_check "A counted 4 packets each way" lab_eq \
    "$(lab_json a "r['translations'][0]['to_peer']['packets'], r['translations'][0]['from_peer']['packets']" conn list)" "4 4"

# --- what was not negotiated is dropped and counted ---
before=$(drops a roce_no_translation)
pkts "$NS_A_NODE" send --iface "$A_NODE_IF" --src "$A_NODE_IP" --dst "$A_IN_IP" --dqpn 0xabcdef --kinds send >/dev/null
lab_check "an unknown QPN is dropped as roce_no_translation" lab_wait "the drop" drops_reach a roce_no_translation $((before + 1))
before=$(drops a roce_wrong_source)
pkts "$NS_A_NODE" send --iface "$A_NODE_IF" --src 198.18.1.77 --dst "$A_IN_IP" --dqpn "$A_QPN" --kinds send,ack >/dev/null
lab_check "a spoofed node is dropped as roce_wrong_source" lab_wait "the drops" drops_reach a roce_wrong_source $((before + 2))
# An outsider on the joining network, sending from gateway B's namespace with an address no peer has.
A_EXT_MAC=$(ip netns exec "$NS_A_GW" cat "/sys/class/net/$A_EXT_IF/address")
before=$(drops a roce_not_peer)
pkts "$NS_B_GW" send --iface "$B_EXT_IF" --src 198.19.0.99 --dst "$A_EXT_IP" --dst-mac "$A_EXT_MAC" \
    --dqpn "$(tr_field a external_vqpn)" --kinds send >/dev/null
lab_check "an outsider on the external side is dropped as roce_not_peer" lab_wait "the drop" drops_reach a roce_not_peer $((before + 1))

# --- the translations go with their processes ---
kill -TERM "$LISTENER"
wait "$LISTENER" || true
lab_check "B removes its translation when 2.7.60 deregisters" lab_wait "B's translation to go" no_translations b
lab_check "A removes its translation when B withdraws 2.7.60, while 1.3.160 still lives" \
    lab_wait "A's translation to go" no_translations a
lab_check "1.3.160 is still running" kill -0 "$CONNECTOR"
before=$(drops a roce_no_translation)
pkts "$NS_A_NODE" send --iface "$A_NODE_IF" --src "$A_NODE_IP" --dst "$A_IN_IP" --dqpn "$A_QPN" --kinds send >/dev/null
lab_check "the old vQPN carries nothing now" lab_wait "the drop" drops_reach a roce_no_translation $((before + 1))

echo
if ((LAB_FAILURES)); then
    echo "roce: $LAB_FAILURES check(s) failed"
    exit 1
fi
echo "roce: all checks passed"
