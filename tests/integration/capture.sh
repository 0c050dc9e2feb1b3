#!/usr/bin/env bash
# Integration: `fedgatectl capture` on a running gateway (EAL with --no-huge, where dpdk-pdump cannot
# attach). A capture of node a pinging its gateway, filtered to ICMP, is a valid pcap that tshark
# reads, with the requests and replies in order and nothing else; a capture without a filter sees
# the resolution traffic too; bad input is refused with a clear error and changes nothing.
# usage: capture.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v tshark >/dev/null || { echo "SKIP: tshark is not installed (tools/deps.sh installs it)"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: capture.sh BUILD_DIR}")
LAB_PREFIX=p$((RANDOM % 1000))
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tools/lab.sh"
WORK=$(mktemp -d)
chmod 755 "$WORK"  # tshark drops privileges to read files in some setups
cleanup() {
    if [[ -n ${CAP_PID:-} ]]; then kill "$CAP_PID" 2>/dev/null || true; wait "$CAP_PID" 2>/dev/null || true; fi
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT
lab_up

CTL=("$LAB_BUILD/tools/fedgatectl" --socket "$A_SOCK")
PORT=$(lab_json a "[p['name'] for p in r['ports'] if p['role'] == 'internal'][0]" status)

# --- four ICMP packets: two echo requests from node a, two replies from the gateway ---
"${CTL[@]}" capture --port "$PORT" --count 4 --filter icmp -w "$WORK/ping.pcap" >"$WORK/cap.out" 2>&1 &
CAP_PID=$!
lab_wait "the capture to start" grep -q "^capturing on $PORT" "$WORK/cap.out" || { cat "$WORK/cap.out"; exit 1; }
ip netns exec "$NS_A_NODE" ping -c 2 -i 0.2 -W 2 "$A_IN_IP" >/dev/null
lab_check "the capture ends by itself after 4 packets" lab_wait "fedgatectl capture to exit" bash -c "! kill -0 $CAP_PID"
wait "$CAP_PID" || true
CAP_PID=
lab_check "it says how many it wrote" grep -q "^4 packets written to $WORK/ping.pcap, 0 dropped" "$WORK/cap.out"
lab_check "tshark reads the file as pcap" lab_eq "$(tshark -r "$WORK/ping.pcap" -T fields -e frame.encap_type 2>/dev/null | sort -u)" 1
fields=$(tshark -r "$WORK/ping.pcap" -T fields -E separator=' ' -e ip.src -e ip.dst -e icmp.type 2>/dev/null)
expected=$(printf '%s\n' "$A_NODE_IP $A_IN_IP 8" "$A_IN_IP $A_NODE_IP 0" "$A_NODE_IP $A_IN_IP 8" "$A_IN_IP $A_NODE_IP 0")
lab_check "tshark shows request, reply, request, reply between node a and the gateway" lab_eq "$fields" "$expected"
lab_check "timestamps are now, not 1970" python3 -c "
import struct, sys, time
d = open('$WORK/ping.pcap', 'rb').read()
assert struct.unpack('<I', d[:4])[0] == 0xa1b2c3d4
sec = struct.unpack('<I', d[24:28])[0]
sys.exit(0 if abs(sec - time.time()) < 600 else 1)"

# --- no filter, a duration: whatever crosses the port, the registration of a process too ---
"${CTL[@]}" capture --port "$PORT" --duration 3 -w "$WORK/all.pcap" >"$WORK/all.out" 2>&1 &
CAP_PID=$!
lab_wait "the second capture to start" grep -q "^capturing on $PORT" "$WORK/all.out"
ip netns exec "$NS_A_NODE" "$LAB_BUILD/tools/fedgate-node" --gateway "$A_IN_IP" register --pid 1.2.3 \
    --transport tcp --listen "$A_NODE_IP:5000" --once >/dev/null
wait "$CAP_PID" || true
CAP_PID=
lab_check "an unfiltered capture sees the registration on udp 7410" \
    bash -c "tshark -r '$WORK/all.pcap' -Y 'udp.port == 7410' 2>/dev/null | grep -q ."

# --- refusals ---
out=$("${CTL[@]}" capture --port nosuch -w "$WORK/x.pcap" 2>&1 || true)
lab_check "an unknown port is refused, naming the ports there are" grep -q "port 'nosuch' is not one of this gateway's ports" <<<"$out"
out=$("${CTL[@]}" capture --port "$PORT" --filter "icmp and and" -w "$WORK/x.pcap" 2>&1 || true)
echo "     $out"
lab_check "a bad filter is refused with libpcap's reason" grep -q "filter 'icmp and and': .*syntax error" <<<"$out"
lab_check "no file is left behind by a refused capture" test ! -e "$WORK/x.pcap"
out=$("${CTL[@]}" capture --port "$PORT" -w "$WORK/x.pcap" --count 0 2>&1 || true)
lab_check "--count 0 is a usage error" grep -q "count must be an integer 1..10000000" <<<"$out"
lab_check "the gateway still answers after all that" bash -c "ip netns exec '$NS_A_NODE' ping -q -c 1 -W 2 '$A_IN_IP' >/dev/null"

echo
if ((LAB_FAILURES)); then
    echo "capture: $LAB_FAILURES check(s) failed"
    exit 1
fi
echo "capture: all checks passed"
