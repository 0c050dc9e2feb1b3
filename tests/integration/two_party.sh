#!/usr/bin/env bash
# Integration: both gateways up in their own namespaces, real pings through af_packet ports, and
# fedgatectl status/stats --json reporting exactly the counters that moved. Cleans up on any exit.
# usage: two_party.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: two_party.sh BUILD_DIR}")
LAB_PREFIX=i$((RANDOM % 1000))
source "$(dirname "$0")/../../tools/lab.sh"
trap lab_down EXIT

failures=0
check() { # check DESCRIPTION CMD... — runs CMD, records a failure instead of stopping
    local what=$1
    shift
    if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; failures=$((failures + 1)); fi
}
# jget a|b status|stats PY-EXPR: evaluates a Python expression over the reply `r`.
jget() { lab_ctl "$1" "$2" --json | python3 -c "import json,sys; r=json.load(sys.stdin); print($3)"; }
eq() { [[ $1 == "$2" ]] || { echo "     expected '$2', got '$1'" >&2; return 1; }; }

lab_up

# --- status reports what the config and the kernel say ---
check "A status names its party" eq "$(jget a status 'r["party"], r["party_id"]')" "alpha 1"
check "B status names its party" eq "$(jget b status 'r["party"], r["party_id"]')" "beta 2"
check "A ports with addresses" eq "$(jget a status '" ".join(p["name"]+"="+p["address"] for p in r["ports"])')" \
    "internal=198.18.1.1/24 external=198.19.0.1/24"
check "A ports are af_packet with link up" eq "$(jget a status '" ".join(p["driver"]+":"+str(p["link"]["up"]) for p in r["ports"])')" \
    "net_af_packet:True net_af_packet:True"
kernel_mac=$(ip netns exec "$NS_A_GW" cat "/sys/class/net/$A_IN_IF/address")
check "A internal MAC is the veth's" eq "$(jget a status 'r["ports"][0]["mac"].lower()')" "$kernel_mac"

# --- pings from the nodes to their gateways' addresses ---
before=$(jget a stats 'r["icmp"]["echo_replies_sent"]')
check "node a pings A internal" ip netns exec "$NS_A_NODE" ping -c 3 -i 0.2 -W 5 -q "$A_IN_IP"
check "node a pings A external" ip netns exec "$NS_A_NODE" ping -c 2 -i 0.2 -W 5 -q "$A_EXT_IP"
check "node b pings B internal" ip netns exec "$NS_B_NODE" ping -c 2 -i 0.2 -W 5 -q "$B_IN_IP"
check "A counted exactly 5 echo replies" eq "$(jget a stats 'r["icmp"]["echo_replies_sent"]')" "$((before + 5))"
check "A answered the node's ARP" eq "$(jget a stats 'r["arp"]["replies_sent"] >= 1')" "True"

# --- gateway to gateway across the joining network ---
check "A pings B" eq "$(lab_ctl a ping "$B_EXT_IP" --count 3 --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["sent"], r["received"], r["port"])')" "3 3 external"
check "B pings A" eq "$(lab_ctl b ping "$A_EXT_IP" --count 2 --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["sent"], r["received"])')" "2 2"
# Besides the echo replies, the ring carries B's announce-stream messages (counted on their own;
# one may land between the two counters' reads, so the sum is read again until it is steady).
echo_punts() { jget a stats 'r["control"]["punted"] - r["resolution"]["resolve"]["punted_peer_msgs"] - r["resolution"]["resolve"]["punted_registrations"], r["control"]["unmatched_echo_replies"]'; }
echo_punts_are() { [[ $(echo_punts) == "$1" ]]; }
check "A punted B's echo replies to its control threads" lab_wait "3 echo replies punted" echo_punts_are "3 0"
check "A resolved B with ARP" eq "$(jget a stats 'r["arp"]["requests_sent"] >= 1 and r["neighbour"]["learned"] >= 2')" "True"

# --- what the gateway does not serve is dropped with a reason ---
before=$(jget a stats 'r["drops_by_reason"]["l4_unhandled"]')
ip netns exec "$NS_A_NODE" bash -c "echo probe > /dev/udp/$A_IN_IP/9"
l4_counted() { [[ $(jget a stats 'r["drops_by_reason"]["l4_unhandled"]') == $((before + 1)) ]]; }
lab_wait "the UDP probe to be counted" l4_counted || true
check "UDP to the gateway counted as l4_unhandled" eq "$(jget a stats 'r["drops_by_reason"]["l4_unhandled"]')" "$((before + 1))"
check "the drop is on the internal port" eq "$(jget a stats 'r["ports"][0]["drops_by_reason"].get("l4_unhandled", 0)')" "$((before + 1))"

# --- an address nobody answers: ping fails, the neighbour entry fails after its probes ---
check "ping to a silent address fails with exit 1" bash -c "! '$LAB_BUILD/tools/fedgatectl' --socket '$A_SOCK' ping 198.18.1.99 --count 1 --timeout-ms 300 >/dev/null"
failed_ok() { [[ $(jget a stats 'r["neighbour"]["failed"] >= 1 and r["neighbour"]["unresolved_drops"] >= 1') == True ]]; }
lab_wait "the neighbour entry to fail" failed_ok || true
check "unresolved next hop counted (failed entry, dropped packet)" failed_ok

# --- address resolution between two parties, and across a restart of either gateway ---
NODE=$LAB_BUILD/tools/fedgate-node
REG_OUT=$(mktemp)
ip netns exec "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" register --pid 2.7.42 --transport tcp \
    --listen "$B_NODE_IP:5000" --epoch 4242 >"$REG_OUT" 2>&1 &
REG_PID=$!
trap 'kill $REG_PID 2>/dev/null; rm -f "$REG_OUT"; lab_down' EXIT
lab_wait "node b to register" grep -q '^registered 2.7.42 epoch 4242' "$REG_OUT" || true
a_holds() { [[ $(lab_ctl a dir show 2.7.42 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["kind"], r["record"]["epoch"])') == "announced 4242" ]]; }
resolved_by_a() { ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" resolve 2.7.42 --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["source"], r["address"])'; }
check "A learns B's process from B's announce" lab_wait "A to hold 2.7.42" a_holds
check "node a resolves it from A's cache" eq "$(resolved_by_a)" "cache $B_NODE_IP:5000"
lab_stop a
lab_start a
check "a restarted A gets it again (B's stream starts over)" lab_wait "restarted A to hold 2.7.42" a_holds
lab_stop b
lab_start b
b_holds() { lab_ctl b dir show 2.7.42 >/dev/null 2>&1; }
check "a restarted B gets it back from the process's next heartbeat" lab_wait "B to hold 2.7.42 again" b_holds
check "and A still resolves it" lab_wait "A to hold 2.7.42 after B's restart" a_holds
kill -TERM "$REG_PID"
wait "$REG_PID" || true
gone_from_a() { ! lab_ctl a dir show 2.7.42 >/dev/null 2>&1; }
check "its deregistration reaches A" lab_wait "2.7.42 to leave A" gone_from_a
rm -f "$REG_OUT"
trap lab_down EXIT

# --- a clean stop: exit 0, socket gone; then the CLI names the socket and exits 1 ---
lab_down
trap - EXIT
check "gateway A exited 0 on SIGTERM" eq "$LAB_RC_A" 0
check "gateway B exited 0 on SIGTERM" eq "$LAB_RC_B" 0
check "socket removed" test ! -e "$A_SOCK"
set +e
err=$("$LAB_BUILD/tools/fedgatectl" --socket "$A_SOCK" status 2>&1 >/dev/null)
rc=$?
set -e
check "CLI exits 1 when the daemon is gone" eq "$rc" 1
check "CLI error is one line naming the socket" eq "$(wc -l <<<"$err") $([[ $err == *"$A_SOCK"* ]] && echo named)" "1 named"
check "no namespaces left with our prefix" eq "$(ip netns list | grep -c "^$LAB_PREFIX-" || true)" 0

((failures == 0)) || { echo "$failures checks failed"; exit 1; }
echo "all checks passed"
