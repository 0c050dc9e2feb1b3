#!/usr/bin/env bash
# Integration: the port-map proxy in the two-party topology with real programs (curl and python3's
# http.server, iperf3 TCP and UDP): two clusters through B's one external address, each reaching
# its own node; denied sources and peers counted; deleting a mapping stops new sessions; a restart
# loses no mapping. Cleans up on any exit.
# usage: portmap.sh BUILD_DIR        (LAB_PORTS=af_xdp: the same with af_xdp ports; skips, exit 77,
#                                   where the kernel has no XDP sockets)
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
for tool in curl iperf3 python3 nft; do
    command -v $tool >/dev/null || { echo "portmap.sh: $tool is missing (tools/deps.sh installs it)"; exit 1; }
done
/usr/bin/python3 -c "import grpc" || { echo "portmap.sh: python3-grpcio is missing (tools/deps.sh installs it)"; exit 1; }

LAB_BUILD=$(realpath "${1:?usage: portmap.sh BUILD_DIR}")
LAB_PREFIX=p$((RANDOM % 1000))
source "$(dirname "$0")/../../tools/lab.sh"
lab_need_port_kind
echo "portmap.sh: $LAB_PORTS ports"
WORK=$(mktemp -d)
cleanup() { lab_down; rm -rf "$WORK"; }
trap cleanup EXIT

failures=0
check() {
    local what=$1
    shift
    if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; failures=$((failures + 1)); fi
}
eq() { [[ $1 == "$2" ]] || { echo "     expected '$2', got '$1'" >&2; return 1; }; }
jget() { lab_ctl "$1" "$2" --json | python3 -c "import json,sys; r=json.load(sys.stdin); print($3)"; }
drops() { jget "$1" stats "r['drops_by_reason']['$2']"; }

# Party B gets a third peer, gamma, that no traffic comes from: an export only gamma may use must
# refuse alpha.
lab_edit_configs() {
    cat >>"$B_CONF" <<TOML

[[peer]]
party = "gamma"
party_id = 3
address = "198.19.0.3"
key = "00112233445566778899aabbccddeeff"
TOML
}
lab_up

# Node a's link takes jumbo frames, so its SYNs announce a large MSS that gateway A must clamp to
# what its 1500-byte external port carries. With af_xdp the XDP program on A's veth end caps its
# peer's MTU at about 3500, and the port itself takes frames of under 1800 bytes, so the node's
# end gets 3000 and the gateway's stays at 1500 (nothing larger than a SYN needs the MTU here).
if [[ $LAB_PORTS == af_xdp ]]; then
    ip netns exec "$NS_A_NODE" ip link set "$A_NODE_IF" mtu 3000
else
    ip netns exec "$NS_A_NODE" ip link set "$A_NODE_IF" mtu 9000
    ip netns exec "$NS_A_GW" ip link set "$A_IN_IF" mtu 9000
fi

# Node b answers as two nodes: 198.18.2.10 (cluster c1) and 198.18.2.11 (cluster c2).
ip netns exec "$NS_B_NODE" ip addr add 198.18.2.11/24 dev "$B_NODE_IF"
for n in 10 11; do
    mkdir -p "$WORK/www$n"
    echo "node $n" >"$WORK/www$n/who"
    ip netns exec "$NS_B_NODE" python3 -m http.server 8000 --bind "198.18.2.$n" --directory "$WORK/www$n" \
        >"$WORK/http$n.log" 2>&1 &
done
node_http_up() { ip netns exec "$NS_B_NODE" curl -s -m 2 "http://198.18.2.$1:8000/who" >/dev/null; }
lab_wait "http.server on 198.18.2.10" node_http_up 10
lab_wait "http.server on 198.18.2.11" node_http_up 11

# --- mappings, added at run time with fedgatectl ---
lab_ctl a map add import --cluster c1 --proto tcp --port 8080 --peer beta --peer-port 9000 >/dev/null
lab_ctl b map add export --cluster c1 --proto tcp --port 9000 --node 198.18.2.10:8000 --allow-party alpha >/dev/null
lab_ctl a map add import --cluster c2 --proto tcp --port 8081 --peer beta --peer-port 9001 >/dev/null
lab_ctl b map add export --cluster c2 --proto tcp --port 9001 --node 198.18.2.11:8000 >/dev/null
check "map list shows both clusters' imports on A" eq "$(lab_ctl a map list --json | python3 -c '
import json,sys; r=json.load(sys.stdin); print(" ".join(m["cluster"]+":"+str(m["port"])+":"+m["source"] for m in r["imports"]))')" "c1:8080:cli c2:8081:cli"
set +e
conflict=$(lab_ctl a map add import --cluster cx --proto tcp --port 8080 --peer beta --peer-port 9100 2>&1)
conflict_rc=$?
set -e
check "conflict exits 1 with the port named" eq "$conflict_rc $([[ $conflict == *"import tcp/8080 is already mapped"* ]] && echo named)" "1 named"

# --- HTTP through each cluster reaches its own node, all through 198.19.0.2 ---
fetch() { ip netns exec "$NS_A_NODE" curl -s -m 5 "http://$A_IN_IP:$1/who"; }
check "cluster c1: curl through the port map reaches node .10" eq "$(fetch 8080)" "node 10"
check "cluster c2: curl through the port map reaches node .11" eq "$(fetch 8081)" "node 11"
check "A clamped the jumbo MSS of node a's SYNs" eq "$(( $(jget a stats 'r["nat"]["mss_clamped"]') >= 2 ))" "1"
check "both sessions went through B's one external address" eq "$(lab_ctl a session list --json | python3 -c '
import json,sys; r=json.load(sys.stdin); print(sorted({s["out"]["dst"] for s in r["sessions"] if s["proto"]=="tcp"}))')" "['198.19.0.2:9000', '198.19.0.2:9001']"

# --- a program handed the remote node's external address: node-side nftables from `map nft` ---
lab_ctl a map nft --cluster c2 >"$WORK/c2.nft"
check "map nft writes a DNAT rule for the import" grep -q "ip daddr $B_EXT_IP tcp dport 9001 dnat to $A_IN_IP:8081" "$WORK/c2.nft"
ip netns exec "$NS_A_NODE" nft -f "$WORK/c2.nft"
check "with the rules, node a reaches node .11 by dialling B's external address" eq \
    "$(ip netns exec "$NS_A_NODE" curl -s -m 5 "http://$B_EXT_IP:9001/who")" "node 11"
ip netns exec "$NS_A_NODE" nft -f "$WORK/c2.nft"  # applying twice is harmless
ip netns exec "$NS_A_NODE" nft delete table ip fedgate

# --- a gRPC call (HTTP/2) through a mapping pair; python3-grpcio is Debian's, for /usr/bin/python3 ---
lab_ctl a map add import --cluster c7 --proto tcp --port 50051 --peer beta --peer-port 15051 >/dev/null
lab_ctl b map add export --cluster c7 --proto tcp --port 15051 --node 198.18.2.10:50051 >/dev/null
GRPC=$(dirname "$0")/grpc_echo.py
ip netns exec "$NS_B_NODE" /usr/bin/python3 "$GRPC" serve 198.18.2.10:50051 >"$WORK/grpc.log" 2>&1 &
check "a gRPC call from node a reaches node b's server" eq \
    "$(ip netns exec "$NS_A_NODE" timeout 30 /usr/bin/python3 "$GRPC" call "$A_IN_IP:50051" hello)" "echo: hello"

# --- iperf3: TCP and UDP bytes delivered through a mapping pair ---
lab_ctl a map add import --cluster c3 --proto tcp --port 5201 --peer beta --peer-port 15201 >/dev/null
lab_ctl b map add export --cluster c3 --proto tcp --port 15201 --node 198.18.2.10:5201 >/dev/null
lab_ctl a map add import --cluster c3 --proto udp --port 5201 --peer beta --peer-port 15201 >/dev/null
lab_ctl b map add export --cluster c3 --proto udp --port 15201 --node 198.18.2.10:5201 >/dev/null
iperf() { # iperf NAME ARGS... — one client run against a one-shot server, JSON to $WORK/NAME.json
    local name=$1
    shift
    ip netns exec "$NS_B_NODE" iperf3 -s -B 198.18.2.10 -p 5201 -1 >"$WORK/$name-server.log" 2>&1 &
    local server=$!
    lab_wait "iperf3 server" bash -c "ip netns exec '$NS_B_NODE' ss -ltn | grep -q '198.18.2.10:5201'"
    ip netns exec "$NS_A_NODE" timeout 60 iperf3 -c "$A_IN_IP" -p 5201 -J "$@" >"$WORK/$name.json" || true
    wait "$server" 2>/dev/null || true
}
iperf tcp -t 3
check "iperf3 TCP delivered what it sent (> 10 MB)" eq "$(python3 -c '
import json,sys; r=json.load(open(sys.argv[1]))["end"]
sent, got = r["sum_sent"]["bytes"], r["sum_received"]["bytes"]
print(got > 10_000_000 and got <= sent)' "$WORK/tcp.json")" "True"
iperf udp -u -b 50M -t 3
check "iperf3 UDP delivered with under 5% loss" eq "$(python3 -c '
import json,sys; r=json.load(open(sys.argv[1]))["end"]["sum"]
print(r["bytes"] > 1_000_000 and r["lost_percent"] < 5)' "$WORK/udp.json")" "True"

# --- several data-plane workers (FEDGATE_TOPO_WORKERS, ctest integration_portmap_workers) ---
workers=${FEDGATE_TOPO_WORKERS:-1}
if ((workers > 1)); then
    check "A and B each run $workers workers" eq "$(jget a status "r['workers']") $(jget b status "r['workers']")" "$workers $workers"
    # Sessions were opened by every worker (flows spread) and replies reached them through the
    # hand-off ring (af_packet's fanout does not hash as the workers do).
    for gw in a b; do
        check "gateway ${gw^^}'s workers passed packets to each other" eq "$(jget $gw stats \
            "r['loop']['handoffs_sent'] > 0 and r['loop']['handoffs_received'] > 0")" "True"
        check "gateway ${gw^^} counted no hand-off ring as full" eq "$(drops $gw handoff_ring_full)" 0
    done
    for i in $(seq 20); do fetch 8081 >/dev/null; done
    check "A's sessions came from every worker's port slice" eq "$(lab_ctl a session list --json | python3 -c '
import json,sys; r=json.load(sys.stdin)
print(sorted({int(s["out"]["src"].split(":")[1]) % '"$workers"' for s in r["sessions"]}))')" "$(python3 -c "print(list(range($workers)))")"
fi

# --- an ICMP error about a session goes back to the node that sent the original ---
lab_ctl a map add import --cluster c6 --proto udp --port 5300 --peer beta --peer-port 15300 >/dev/null
lab_ctl b map add export --cluster c6 --proto udp --port 15300 --node 198.18.2.10:5399 >/dev/null
# Counted from here: iperf3's last UDP datagrams above can meet a closed port on node b after the
# test, and the port unreachable that answers them is translated too.
icmp_errors() { jget "$1" stats 'r["nat"]["icmp_errors_translated"]'; }
icmp_a=$(icmp_errors a) icmp_b=$(icmp_errors b)
refused=$(ip netns exec "$NS_A_NODE" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.connect((sys.argv[1], 5300))
s.send(b"anyone?")
try:
    s.recv(100)
    print("answered")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")' "$A_IN_IP")
check "port unreachable from node b reaches node a as ECONNREFUSED" eq "$refused" "refused"
check "both gateways translated the ICMP error" eq "$(($(icmp_errors a) - icmp_a)) $(($(icmp_errors b) - icmp_b))" "1 1"

# --- refusals are drops with a reason ---
lab_ctl a map add import --cluster c4 --proto tcp --port 8084 --peer beta --peer-port 9000 --allow 198.18.1.99/32 >/dev/null
before=$(drops a map_source_denied)
fetch 8084 >/dev/null || true
# (curl retries its SYN, so count at least one)
check "a node outside the import's allowed prefixes is refused and counted" eq "$(( $(drops a map_source_denied) > before ))" "1"
lab_ctl b map add export --cluster c5 --proto tcp --port 9005 --node 198.18.2.10:8000 --allow-party gamma >/dev/null
lab_ctl a map add import --cluster c5 --proto tcp --port 8085 --peer beta --peer-port 9005 >/dev/null
before=$(drops b map_peer_denied)
fetch 8085 >/dev/null || true
check "a peer the export does not allow is refused and counted" eq "$(( $(drops b map_peer_denied) > before ))" "1"

# --- deleting a mapping stops new sessions ---
lab_ctl a map del import --proto tcp --port 8080 >/dev/null
before=$(drops a l4_unhandled)
check "after map del, the mapped port no longer connects" bash -c "! ip netns exec '$NS_A_NODE' curl -s -m 2 http://$A_IN_IP:8080/who >/dev/null"
check "the refused SYN is counted as l4_unhandled" eq "$(( $(drops a l4_unhandled) > before ))" "1"
check "cluster c2 still works" eq "$(fetch 8081)" "node 11"

# --- a restart loses no mapping ---
lab_stop b
check "gateway B stopped cleanly" eq "$LAB_RC" 0
lab_start b
check "B's run-time exports are back after the restart" eq "$(lab_ctl b map list --json | python3 -c '
import json,sys; r=json.load(sys.stdin); print(" ".join(sorted(m["cluster"]+":"+str(m["port"]) for m in r["exports"])))')" "c1:9000 c2:9001 c3:15201 c3:15201 c5:9005 c6:15300 c7:15051"
lab_stop a
lab_start a
check "A's deleted mapping stays deleted after the restart" eq "$(lab_ctl a map list --json | python3 -c '
import json,sys; r=json.load(sys.stdin); print(8080 in [m["port"] for m in r["imports"]])')" "False"
check "traffic flows again after both restarts" eq "$(fetch 8081)" "node 11"

((failures == 0)) || { echo "$failures checks failed"; exit 1; }
echo "all checks passed"
