#!/usr/bin/env bash
# Integration: `fedgatectl capture` on a running gateway (EAL with --no-huge, where dpdk-pdump cannot
# attach). A capture of node a pinging its gateway, filtered to ICMP (an rte_bpf program), is a pcapng
# file that tshark reads, with the requests (inbound) and replies (outbound) in order on the internal
# port's interface and nothing else; the same through `-w - | tshark -r -`; a capture without a
# filter sees the resolution traffic too; bad input is refused with a clear error and changes nothing.
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
"${CTL[@]}" capture --port "$PORT" --count 4 --filter icmp -w "$WORK/ping.pcapng" >"$WORK/cap.out" 2>&1 &
CAP_PID=$!
lab_wait "the capture to start" grep -q "^capturing on $PORT" "$WORK/cap.out" || { cat "$WORK/cap.out"; exit 1; }
ip netns exec "$NS_A_NODE" ping -c 2 -i 0.2 -W 2 "$A_IN_IP" >/dev/null
lab_check "the capture ends by itself after 4 packets" lab_wait "fedgatectl capture to exit" bash -c "! kill -0 $CAP_PID"
wait "$CAP_PID" || true
CAP_PID=
lab_check "it says how many it wrote" grep -q "^4 packets written to $WORK/ping.pcapng, 0 dropped" "$WORK/cap.out"
lab_check "the file is pcapng (section header block 0x0a0d0d0a)" python3 -c "
import struct, sys
d = open('$WORK/ping.pcapng', 'rb').read()
sys.exit(0 if struct.unpack('<I', d[:4])[0] == 0x0a0d0d0a and struct.unpack('<I', d[8:12])[0] == 0x1a2b3c4d else 1)"
lab_check "capinfos calls it pcapng" bash -c "capinfos -t '$WORK/ping.pcapng' | grep -q pcapng"
# Per packet: the interface it crossed (the gateway's internal port, named after its kernel
# interface) and the direction from the EPB flags: requests in, replies out.
fields=$(tshark -r "$WORK/ping.pcapng" -T fields -E separator=' ' -e frame.interface_name \
    -e frame.packet_flags_direction -e ip.src -e ip.dst -e icmp.type 2>/dev/null)
echo "$fields" | sed 's/^/     /'
expected=$(printf '%s\n' "$A_IN_IF 1 $A_NODE_IP $A_IN_IP 8" "$A_IN_IF 2 $A_IN_IP $A_NODE_IP 0" \
    "$A_IN_IF 1 $A_NODE_IP $A_IN_IP 8" "$A_IN_IF 2 $A_IN_IP $A_NODE_IP 0")
lab_check "tshark shows request in, reply out, request in, reply out on $A_IN_IF" lab_eq "$(sed 's/ 0x0*/ /' <<<"$fields")" "$expected"
lab_check "tshark names the directions inbound and outbound" bash -c \
    "tshark -r '$WORK/ping.pcapng' -V 2>/dev/null | grep -c 'Direction: Inbound\\|Direction: Outbound' | grep -qx 4"
lab_check "timestamps are now, not 1970" python3 -c "
import subprocess, sys, time
t = subprocess.run(['tshark', '-r', '$WORK/ping.pcapng', '-T', 'fields', '-e', 'frame.time_epoch'],
                   capture_output=True, text=True).stdout.split()
sys.exit(0 if len(t) == 4 and all(abs(float(x) - time.time()) < 600 for x in t) and t == sorted(t) else 1)"

# --- -w -: fedgated writes into fedgatectl's standard output (passed over the socket), read by tshark ---
("${CTL[@]}" capture --port "$PORT" --count 4 --filter icmp -w - 2>"$WORK/pipe.err" |
    tshark -r - -T fields -E separator=' ' -e frame.packet_flags_direction -e icmp.type >"$WORK/pipe.out" 2>/dev/null) &
CAP_PID=$!
lab_wait "the piped capture to start" grep -q "^capturing on $PORT to standard output" "$WORK/pipe.err" || cat "$WORK/pipe.err"
ip netns exec "$NS_A_NODE" ping -c 2 -i 0.2 -W 2 "$A_IN_IP" >/dev/null
lab_check "fedgatectl capture -w - | tshark -r - ends after 4 packets" lab_wait "the pipe to end" bash -c "! kill -0 $CAP_PID"
wait "$CAP_PID" || true
CAP_PID=
lab_check "tshark read requests in and replies out from the pipe" \
    lab_eq "$(sed 's/^0x0*//' "$WORK/pipe.out" | tr '\n' ' ')" "1 8 2 0 1 8 2 0 "
lab_check "fedgatectl said what it wrote on stderr" grep -q "^4 packets written to standard output, 0 dropped" "$WORK/pipe.err"

# --- what capture_status reports: the format, and the filter JIT-compiled (x86-64 has DPDK's BPF JIT) ---
"${CTL[@]}" capture --port "$PORT" --filter 'udp port 7410' --duration 1 -w "$WORK/jit.pcapng" --json >"$WORK/jit.json"
lab_check "the reply says pcapng and filter_jit" python3 -c "
import json, sys
r = json.load(open('$WORK/jit.json'))
print('     ', {k: r.get(k) for k in ('format', 'filter_jit', 'dropped_ring_full', 'dropped_no_mbuf', 'state')})
sys.exit(0 if r['format'] == 'pcapng' and r['filter_jit'] is True and r['state'] == 'stopped' else 1)"

# --- no filter, a duration: whatever crosses the port, the registration of a process too ---
"${CTL[@]}" capture --port "$PORT" --duration 3 -w "$WORK/all.pcapng" >"$WORK/all.out" 2>&1 &
CAP_PID=$!
lab_wait "the second capture to start" grep -q "^capturing on $PORT" "$WORK/all.out"
ip netns exec "$NS_A_NODE" "$LAB_BUILD/tools/fedgate-node" --gateway "$A_IN_IP" register --pid 1.2.3 \
    --transport tcp --listen "$A_NODE_IP:5000" --once >/dev/null
wait "$CAP_PID" || true
CAP_PID=
lab_check "an unfiltered capture sees the registration on udp 7410" \
    bash -c "tshark -r '$WORK/all.pcapng' -Y 'udp.port == 7410' 2>/dev/null | grep -q ."

# --- refusals ---
out=$("${CTL[@]}" capture --port nosuch -w "$WORK/x.pcap" 2>&1 || true)
lab_check "an unknown port is refused, naming the ports there are" grep -q "port 'nosuch' is not one of this gateway's ports" <<<"$out"
out=$("${CTL[@]}" capture --port "$PORT" --filter "icmp and and" -w "$WORK/x.pcap" 2>&1 || true)
echo "     $out"
lab_check "a bad filter is refused with libpcap's reason" grep -q "filter 'icmp and and': .*syntax error" <<<"$out"
out=$("${CTL[@]}" capture --port "$PORT" --filter "icmp and and" -w - 2>&1 >/dev/null || true)
lab_check "a bad filter is refused with -w - too" grep -q "filter 'icmp and and': .*syntax error" <<<"$out"
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
