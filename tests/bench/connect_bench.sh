#!/usr/bin/env bash
# tests/bench/connect_bench.sh — connection setup and the tcp backend's throughput through two
# gateways, each beside a reference on the same path in the same run (two-party lab, tools/lab.sh).
#
# 1. Setup: a process on node a (fedgate-node connect --repeat) connects COUNT times, one after the
#    other, to a listener on node b by process ID: resolve, REQ/REP/RTU relayed by both gateways,
#    then the tcp data channel through the automatic mappings. Reported: setups per second and
#    p50/p99 setup latency. Then the same with 8 threads at once. Reference: plain TCP connects
#    (connect + close, from python3 on node a) to the same listener through the same automatic
#    import/export pair, i.e. the same port-map path without the handshake. Reported as ratios:
#    setup p50 / connect p50, and setups/s / connects/s; beside them, how often each gateway's
#    lcore woke its sleeping punt thread (stats control.wakeups) during each run.
# 2. Throughput: one connection sends BYTES over the tcp backend (with SHA-256 on both sides, as
#    fedgate-node always does); reference: iperf3 (one TCP stream, 10 s) through a mapping pair of
#    the same two gateways to the same node. Reported as Mbit/s and the ratio.
# 3. Frameworks' paths, same bytes, same gateways: the Python module (fedgate.Endpoint, send of a
#    memoryview / recv_into, no digest) and the sidecar (iperf3 between `fedgate-node forward` on
#    node a and `fedgate-node expose` on node b, by process ID), each beside fedgate-node connect
#    (section 2) and iperf3 through a static mapping pair. Reported as Mbit/s and ratios.
#
# usage: connect_bench.sh BUILD_DIR [COUNT] [BYTES]   (root; about 3 minutes)
#        connect_bench.sh BUILD_DIR --smoke          (CI: tiny sizes, checks it runs and reports)
set -euo pipefail
BUILD=$(realpath "${1:?usage: connect_bench.sh BUILD_DIR [COUNT] [BYTES] | --smoke}")
IPERF_S=10
if [[ ${2:-} == --smoke ]]; then
    # A sanitizer build's Python module would also need libasan preloaded.
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "network namespaces"
    COUNT=10 BYTES=8388608 IPERF_S=1
else
    COUNT=${2:-1000}
    BYTES=${3:-1073741824}
fi
[[ $COUNT =~ ^[0-9]+$ ]] && ((COUNT >= 10)) || { echo "connect_bench: COUNT must be an integer >= 10" >&2; exit 2; }
[[ $BYTES =~ ^[0-9]+$ ]] && ((BYTES >= 1048576)) || { echo "connect_bench: BYTES must be >= 1048576" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "connect_bench: run as root (network namespaces)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "connect_bench: needs iperf3 (tools/deps.sh installs it)" >&2; exit 1; }

LAB_BUILD=$BUILD
LAB_PREFIX=kb$((RANDOM % 100))
LAB_TIMEOUT_S=120
source "$(dirname "$0")/../../tools/lab.sh"
NODE=$BUILD/tools/fedgate-node
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # Only these: a bare `wait` would also wait for the gateways, which lab_down stops.
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT
SUMMARY=()
result() { echo "  $*"; SUMMARY+=("$*"); }
in_node() {
    local g=$1 ns gw ip
    shift
    case $g in a) ns=$NS_A_NODE gw=$A_IN_IP ip=$A_NODE_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ip=$B_NODE_IP ;; esac
    ip netns exec "$ns" "$NODE" --gateway "$gw" --bind "$ip" "$@"
}
stats() { # stats FILE — p50/p99/mean of setup_us over fedgate-node connect --json arrays in FILE
    python3 - "$1" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
docs = [d for d in re.split(r"(?m)^(?=\[)", text) if d.strip()]
us = sorted(c["setup_us"] for d in docs for c in json.loads(d) if c.get("digest") == "ok")
bad = sum(1 for d in docs for c in json.loads(d) if c.get("digest") != "ok")
pick = lambda q: us[min(len(us) - 1, int(q * len(us)))]
print(f"{len(us)} {bad} {pick(0.5):.0f} {pick(0.99):.0f}")
PY
}

lab_up
echo "== connect_bench: $COUNT setups, $BYTES bytes, $(nproc) cores, $(date -u +%FT%TZ)"
ip netns exec "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" --bind "$B_NODE_IP" listen --pid 2.7.42 >"$WORK/listen" 2>&1 &
PIDS+=($!)
lab_wait "the listener" grep -q "^listening 2.7.42" "$WORK/listen"
lab_wait "A to learn 2.7.42" lab_ctl a dir show 2.7.42

# control.wakeups of gateway a or b (n/a on a build without the counter).
wakeups() { lab_json "$1" "r['control'].get('wakeups', 'n/a')" stats; }
delta() { if [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ ]]; then echo $(($2 - $1)); else echo n/a; fi; }

echo "-- 1. setup: sequential, then 8 at once"
wa0=$(wakeups a) wb0=$(wakeups b)
t0=$(date +%s.%N)
in_node a connect --pid 1.3.100 --to 2.7.42 --bytes 0 --repeat "$COUNT" --json >"$WORK/seq" 2>"$WORK/seq.err" || true
t1=$(date +%s.%N)
wa1=$(wakeups a) wb1=$(wakeups b)
read -r ok bad p50 p99 < <(stats "$WORK/seq")
rate=$(python3 -c "print(f'{$ok / ($t1 - $t0):.0f}')")
result "fedgate connect, sequential: $ok ok, $bad failed, $rate setups/s (includes process start), p50 $p50 us, p99 $p99 us"
result "  punt thread wake-ups: gateway A $(delta "$wa0" "$wa1"), gateway B $(delta "$wb0" "$wb1")"
per=$((COUNT / 8))
t0=$(date +%s.%N)
in_node a connect --pid 1.3.101 --to 2.7.42 --bytes 0 --repeat "$per" --parallel 8 --json >"$WORK/par" 2>"$WORK/par.err" || { echo "  (some failed:"; sort "$WORK/par.err" | uniq -c | head -5; echo "  )"; }
t1=$(date +%s.%N)
wa2=$(wakeups a) wb2=$(wakeups b)
read -r okp badp p50p p99p < <(stats "$WORK/par")
ratep=$(python3 -c "print(f'{$okp / ($t1 - $t0):.0f}')")
result "fedgate connect, 8 threads: $okp ok, $badp failed, $ratep setups/s, p50 $p50p us, p99 $p99p us"
result "  punt thread wake-ups: gateway A $(delta "$wa1" "$wa2"), gateway B $(delta "$wb1" "$wb2")"

# The reference needs the automatic import to stay: a holder keeps a connection's process alive.
ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" --bind "$A_NODE_IP" connect --pid 1.3.102 --to 2.7.42 \
    --bytes 0 --hold >"$WORK/hold" 2>&1 &
PIDS+=($!)
lab_wait "the holder" grep -q "digest" "$WORK/hold"
import_port=$(lab_json a "[m['port'] for m in r['imports'] if m['source'] == 'auto'][0]" map list)
ip netns exec "$NS_A_NODE" python3 - "$A_IN_IP" "$import_port" "$COUNT" >"$WORK/plain" <<'PY'
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lat = []
t0 = time.perf_counter()
for _ in range(n):
    s = socket.socket()
    a = time.perf_counter()
    s.connect((host, port))
    lat.append((time.perf_counter() - a) * 1e6)
    s.close()
total = time.perf_counter() - t0
lat.sort()
print(f"{n} {n / total:.0f} {lat[len(lat) // 2]:.0f} {lat[min(n - 1, int(0.99 * n))]:.0f}")
PY
read -r pn prate pp50 pp99 <"$WORK/plain"
result "plain TCP connect, same port-map path: $pn connects, $prate connects/s, p50 $pp50 us, p99 $pp99 us"
result "setup latency ratio (fedgate p50 / plain TCP p50): sequential $(python3 -c "print(f'{$p50 / $pp50:.1f}')"), 8 threads $(python3 -c "print(f'{$p50p / $pp50:.1f}')")"
result "setup rate ratio (fedgate setups/s / plain TCP connects/s): sequential $(python3 -c "print(f'{$rate / $prate:.2f}')"), 8 threads $(python3 -c "print(f'{$ratep / $prate:.2f}')")"

echo "-- 2. throughput: one tcp-backend connection beside iperf3"
in_node a connect --pid 1.3.103 --to 2.7.42 --bytes "$BYTES" --json >"$WORK/bulk" 2>"$WORK/bulk.err"
fg_mbit=$(python3 -c "import json; c = json.load(open('$WORK/bulk'))[0]; print(f\"{c['mbit_s']:.0f}\" if c.get('digest') == 'ok' else 0)")
lab_ctl a map add import --cluster bench --proto tcp --port 9201 --peer beta --peer-port 19201 >/dev/null
lab_ctl b map add export --cluster bench --proto tcp --port 19201 --node "$B_NODE_IP:5201" >/dev/null
ip netns exec "$NS_B_NODE" iperf3 -s -B "$B_NODE_IP" -p 5201 -1 >/dev/null 2>&1 &
PIDS+=($!)
lab_wait "iperf3 server" bash -c "ip netns exec '$NS_B_NODE' ss -ltn | grep -q '$B_NODE_IP:5201'"
ip netns exec "$NS_A_NODE" iperf3 -c "$A_IN_IP" -p 9201 -t "$IPERF_S" -J >"$WORK/iperf.json"
ip_mbit=$(python3 -c "import json; r = json.load(open('$WORK/iperf.json')); print(f\"{r['end']['sum_received']['bits_per_second'] / 1e6:.0f}\")")
result "tcp backend, 1 connection, $BYTES bytes with SHA-256 both sides: $fg_mbit Mbit/s"
result "iperf3, 1 TCP stream, $IPERF_S s, same gateways: $ip_mbit Mbit/s"
result "throughput ratio (fedgate tcp backend / iperf3): $(python3 -c "print(f'{$fg_mbit / max($ip_mbit, 1):.2f}')")"

echo "-- 3. the Python module and the sidecar, same gateways"
# The Python module: from the build tree (client/python), run by Debian's python3.
pymod=$(find "$BUILD/client/python" -maxdepth 2 -name 'fedgate*.so' 2>/dev/null | head -1)
if [[ -n $pymod ]]; then
    pydir=$(dirname "$pymod")
    ip netns exec "$NS_B_NODE" env PYTHONPATH="$pydir" /usr/bin/python3 - "$B_IN_IP" "$B_NODE_IP" >"$WORK/py_rx" 2>&1 <<'PY' &
import sys, fedgate
buf = bytearray(4 << 20)
with fedgate.Endpoint(gateway=sys.argv[1], pid="2.7.60", bind=sys.argv[2], transport="tcp") as ep:
    ep.listen()
    print("listening", flush=True)
    with ep.accept(120) as c:
        n = 0
        while (k := c.recv_into(buf)) > 0:
            n += k
    print("received", n, flush=True)
PY
    PIDS+=($!)
    lab_wait "the Python receiver" grep -q "^listening" "$WORK/py_rx"
    lab_wait "A to learn 2.7.60" lab_ctl a dir show 2.7.60
    ip netns exec "$NS_A_NODE" env PYTHONPATH="$pydir" /usr/bin/python3 - "$A_IN_IP" "$A_NODE_IP" "$BYTES" >"$WORK/py_tx" 2>&1 <<'PY' || true
import sys, time, fedgate
total = int(sys.argv[3])
chunk = memoryview(bytearray(b"\x5a" * (4 << 20)))
with fedgate.Endpoint(gateway=sys.argv[1], pid="1.3.110", bind=sys.argv[2], transport="tcp") as ep:
    c = ep.connect("2.7.60")
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        part = chunk[: min(len(chunk), total - sent)]
        c.send(part)
        sent += len(part)
    c.shutdown()
    c.recv(1)  # b"" once the receiver has read everything and closed
    dt = time.perf_counter() - t0
    c.close()
print(f"{sent} {sent * 8 / dt / 1e6:.0f}")
PY
    read -r py_bytes py_mbit <"$WORK/py_tx" || true
    lab_wait "the Python receiver to finish" grep -q "^received" "$WORK/py_rx"
    py_got=$(sed -n 's/^received //p' "$WORK/py_rx")
    [[ $py_got == "$BYTES" && ${py_bytes:-0} == "$BYTES" ]] || { echo "  Python module: sent ${py_bytes:-?}, received ${py_got:-?} of $BYTES" >&2; py_mbit=0; }
    result "Python module, 1 connection, $BYTES bytes: ${py_mbit:-0} Mbit/s"
    result "  ratio to fedgate-node connect: $(python3 -c "print(f'{${py_mbit:-0} / max($fg_mbit, 1):.2f}')"), to iperf3: $(python3 -c "print(f'{${py_mbit:-0} / max($ip_mbit, 1):.2f}')")"
else
    result "Python module: not built (no fedgate*.so under $BUILD/client/python)"
fi

# The sidecar: iperf3 by process ID, no mapping by hand.
ip netns exec "$NS_B_NODE" iperf3 -s -B 127.0.0.1 -p 5202 -1 >/dev/null 2>&1 &
PIDS+=($!)
in_node b expose --pid 2.7.61 --to 127.0.0.1:5202 >"$WORK/expose" 2>&1 &
PIDS+=($!)
lab_wait "expose" grep -q "^exposing" "$WORK/expose"
lab_wait "A to learn 2.7.61" lab_ctl a dir show 2.7.61
in_node a forward --listen 127.0.0.1:5203 --to 2.7.61 --pid 1.3.111 >"$WORK/forward" 2>&1 &
PIDS+=($!)
lab_wait "forward" grep -q "^forwarding" "$WORK/forward"
ip netns exec "$NS_A_NODE" iperf3 -c 127.0.0.1 -p 5203 -t "$IPERF_S" -J >"$WORK/iperf_sc.json" || true
sc_mbit=$(python3 -c "import json; r = json.load(open('$WORK/iperf_sc.json')); print(f\"{r['end']['sum_received']['bits_per_second'] / 1e6:.0f}\")" 2>/dev/null || echo 0)
result "iperf3 through forward/expose by process ID, $IPERF_S s: $sc_mbit Mbit/s"
result "  ratio to fedgate-node connect: $(python3 -c "print(f'{$sc_mbit / max($fg_mbit, 1):.2f}')"), to iperf3 through a static mapping: $(python3 -c "print(f'{$sc_mbit / max($ip_mbit, 1):.2f}')")"

echo
echo "== summary"
printf '  %s\n' "${SUMMARY[@]}"
# Smoke mode checks that every path moved its bytes (never how fast).
if [[ ${2:-} == --smoke ]]; then
    for f in "fedgate-node connect:$fg_mbit" "iperf3:$ip_mbit" "Python module:${py_mbit:-0}" "forward/expose:$sc_mbit"; do
        [[ ${f##*:} =~ ^[0-9]+$ && ${f##*:} -gt 0 ]] || { echo "connect_bench: ${f%%:*} moved nothing" >&2; exit 1; }
    done
    echo "connect_bench: smoke run complete"
fi
