#!/usr/bin/env bash
# tests/bench/lab_bench.sh — the two-party lab through fedgate beside a pair of Linux kernel
# gateways doing the same port map, on the same kind of namespaces and veths, in one run.
#
# The reference: tools/topo.sh's topology (its own prefix), but the gateway namespaces route in the
# kernel: addresses on the gateway ends, ip_forward on, and nftables doing the port map, gateway
# A DNAT A_IN:port -> B_EXT:peer-port and SNAT to A_EXT, gateway B DNAT B_EXT:peer-port ->
# node:port and SNAT to B_IN (the full NAT fedgate does). Then the same topology with fedgated on
# both gateways (tools/lab.sh) and the same mappings made with fedgatectl, once per port kind.
# Measured from node a to node b in each, one after the other:
#   - throughput: iperf3, one TCP stream;
#   - ping-pong: sockperf TCP ping-pong, 64-byte messages, round trip = 2 x sockperf's median
#     latency (it reports half a round trip);
#   - short connections per second: connect + close in a loop from python3 on node a to a
#     listener on node b that accepts and closes (one loop, or --cps-clients N loops at once),
#     with the median and 99th percentile of the connect() calls' times over all the loops
#     (the SYN's round trip through both gateways, and the loop's own Python around it); and,
#     through fedgate, both gateways' CPU time (utime + stime) over the loops, per connection;
#   - idle CPU: each fedgated's CPU time (utime + stime from /proc/PID/stat) over a quiet
#     stretch after the traffic, as ms of CPU per second.
# Reported: a table of the figures and the ratios fedgate / kernel.
#
# usage: lab_bench.sh BUILD_DIR [SECONDS] [--ports "af_packet af_xdp"] [--idle backoff|spin]
#                      [--yield-us N]   ([dataplane] idle_yield_us; 0: wait as soon as idle)
#                      [--nodes-cpu CPU] (every setup: the nodes' programs pinned to CPU with
#                                         taskset; by default the scheduler places them)
#                      [--kernel-rps MASK] (the kernel pair: RPS on its four gateway veths, their
#                                         receive work steered to the CPUs of MASK, hex as in
#                                         rps_cpus; with --nodes-cpu 0 --kernel-rps 2 both kinds
#                                         of gateway work on CPU 1 and the nodes on CPU 0)
#                      [--gateway-cpus float|pinned] (fedgate's data-plane lcores: float, the
#                                         default, free to run on any CPU as the kernel pair's
#                                         forwarding is (FEDGATE_TOPO_FLOAT=1); pinned, both on
#                                         CPU 1 as tools/topo.sh places them, sharing one CPU)
#                      [--cps-clients N] (N connect loops at once, each a process of its own;
#                                         default 1: one connection at a time, which measures
#                                         the round trip of a connection's set-up more than
#                                         how many the gateways can make)
#                                                           (root; about 2 minutes at 10 s)
#        lab_bench.sh BUILD_DIR --smoke    (CI: a second or two each; checks it runs and reports)
set -euo pipefail
BUILD=$(realpath "${1:?usage: lab_bench.sh BUILD_DIR [SECONDS] [--ports KINDS] | --smoke}")
shift
SMOKE=0 SECS=10 IDLE_S=5 KINDS="af_packet af_xdp" IDLE=backoff YIELD_US= NODES_CPU= KERNEL_RPS= CPS_CLIENTS=1 GATEWAY_CPUS=float
while (($#)); do
    case $1 in
        --smoke) SMOKE=1; shift ;;
        --ports) KINDS=${2:?--ports needs a list}; shift 2 ;;
        --idle) IDLE=${2:?--idle needs backoff or spin}; shift 2 ;;
        --yield-us) YIELD_US=${2:?--yield-us needs a number of microseconds}; shift 2 ;;
        --nodes-cpu) NODES_CPU=${2:?--nodes-cpu needs a CPU number}; shift 2 ;;
        --kernel-rps) KERNEL_RPS=${2:?--kernel-rps needs a CPU mask in hex}; shift 2 ;;
        --gateway-cpus) GATEWAY_CPUS=${2:?--gateway-cpus needs float or pinned}; shift 2 ;;
        --cps-clients) CPS_CLIENTS=${2:?--cps-clients needs a number of connect loops}; shift 2 ;;
        *) SECS=$1; shift ;;
    esac
done
if ((SMOKE)); then
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "network namespaces"
    SECS=1 IDLE_S=1
fi
[[ $IDLE == backoff || $IDLE == spin ]] || { echo "lab_bench: --idle is backoff or spin" >&2; exit 2; }
[[ -z $YIELD_US || $YIELD_US =~ ^[0-9]+$ ]] || { echo "lab_bench: --yield-us must be a number of microseconds, not '$YIELD_US'" >&2; exit 2; }
[[ -z $NODES_CPU || ($NODES_CPU =~ ^[0-9]+$ && NODES_CPU -lt $(nproc)) ]] ||
    { echo "lab_bench: --nodes-cpu must be a CPU of this machine (0..$(($(nproc) - 1))), not '$NODES_CPU'" >&2; exit 2; }
[[ -z $KERNEL_RPS || $KERNEL_RPS =~ ^[0-9a-fA-F]+$ ]] ||
    { echo "lab_bench: --kernel-rps must be a CPU mask in hex (2: CPU 1), not '$KERNEL_RPS'" >&2; exit 2; }
[[ $GATEWAY_CPUS == float || $GATEWAY_CPUS == pinned ]] ||
    { echo "lab_bench: --gateway-cpus is float or pinned, not '$GATEWAY_CPUS'" >&2; exit 2; }
[[ $CPS_CLIENTS =~ ^[0-9]+$ ]] && ((CPS_CLIENTS >= 1 && CPS_CLIENTS <= 64)) ||
    { echo "lab_bench: --cps-clients must be a number of connect loops, 1..64, not '$CPS_CLIENTS'" >&2; exit 2; }
[[ $SECS =~ ^[0-9]+$ ]] && ((SECS >= 1)) || { echo "lab_bench: SECONDS must be an integer >= 1" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "lab_bench: run as root (network namespaces)" >&2; exit 1; }
for tool in iperf3 sockperf nft python3; do
    command -v $tool >/dev/null || { echo "lab_bench: needs $tool (tools/deps.sh installs it)" >&2; exit 1; }
done
if [[ $KINDS == *af_xdp* ]] && ! python3 -c 'import socket; socket.socket(44, socket.SOCK_RAW, 0).close()' 2>/dev/null; then
    echo "lab_bench: this kernel has no XDP sockets: measuring af_packet only" >&2
    KINDS=${KINDS//af_xdp/}
fi

# tools/topo.sh writes the gateways' configs.
if [[ $GATEWAY_CPUS == float ]]; then export FEDGATE_TOPO_FLOAT=1; else export FEDGATE_TOPO_FLOAT=0; fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LAB_BUILD=$BUILD
LAB_PREFIX=fb$((RANDOM % 100))
LAB_TIMEOUT_S=120
source "$ROOT/tools/lab.sh"
KPREFIX=kp$((RANDOM % 100))
WORK=$(mktemp -d)
PIDS=()
stop_pids() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_pids
    lab_down
    "$ROOT/tools/topo.sh" --prefix "$KPREFIX" down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# The services on node b and the ports node a dials at its gateway (the mapped ports).
readonly IPERF_PORT=5201 SP_PORT=11111 CPS_PORT=7000
readonly A_IPERF=9201 A_SP=9202 A_CPS=9203           # on A_IN
readonly B_IPERF=19201 B_SP=19202 B_CPS=19203        # on B_EXT

# The nodes' programs, pinned where --nodes-cpu says (in every setup alike).
PIN=()
[[ -z $NODES_CPU ]] || PIN=(taskset -c "$NODES_CPU")

# ---- the kernel gateway pair ----------------------------------------------------------------
kernel_pair_up() {
    "$ROOT/tools/topo.sh" --prefix "$KPREFIX" up >/dev/null
    eval "$("$ROOT/tools/topo.sh" --prefix "$KPREFIX" env)"
    ip -n "$NS_A_GW" addr add "$A_IN_IP/24" dev "$A_IN_IF"
    ip -n "$NS_A_GW" addr add "$A_EXT_IP/24" dev "$A_EXT_IF"
    ip -n "$NS_B_GW" addr add "$B_IN_IP/24" dev "$B_IN_IF"
    ip -n "$NS_B_GW" addr add "$B_EXT_IP/24" dev "$B_EXT_IF"
    ip netns exec "$NS_A_GW" sysctl -q -w net.ipv4.ip_forward=1
    ip netns exec "$NS_B_GW" sysctl -q -w net.ipv4.ip_forward=1
    if [[ -n $KERNEL_RPS ]]; then
        local x ns dev
        for x in "$NS_A_GW:$A_IN_IF" "$NS_A_GW:$A_EXT_IF" "$NS_B_GW:$B_IN_IF" "$NS_B_GW:$B_EXT_IF"; do
            IFS=: read -r ns dev <<<"$x"
            # /sys of the namespace: ip netns exec mounts it for the command.
            ip netns exec "$ns" sh -c "echo $KERNEL_RPS >/sys/class/net/$dev/queues/rx-0/rps_cpus" ||
                { echo "lab_bench: cannot set RPS on $dev in $ns" >&2; exit 1; }
        done
    fi
    ip netns exec "$NS_A_GW" nft -f - <<NFT
table ip portmap {
    chain pre {
        type nat hook prerouting priority dstnat;
        ip daddr $A_IN_IP tcp dport $A_IPERF dnat to $B_EXT_IP:$B_IPERF
        ip daddr $A_IN_IP tcp dport $A_SP dnat to $B_EXT_IP:$B_SP
        ip daddr $A_IN_IP tcp dport $A_CPS dnat to $B_EXT_IP:$B_CPS
    }
    chain post {
        type nat hook postrouting priority srcnat;
        oifname "$A_EXT_IF" snat to $A_EXT_IP
    }
}
NFT
    ip netns exec "$NS_B_GW" nft -f - <<NFT
table ip portmap {
    chain pre {
        type nat hook prerouting priority dstnat;
        ip daddr $B_EXT_IP tcp dport $B_IPERF dnat to $B_NODE_IP:$IPERF_PORT
        ip daddr $B_EXT_IP tcp dport $B_SP dnat to $B_NODE_IP:$SP_PORT
        ip daddr $B_EXT_IP tcp dport $B_CPS dnat to $B_NODE_IP:$CPS_PORT
    }
    chain post {
        type nat hook postrouting priority srcnat;
        oifname "$B_IN_IF" snat to $B_IN_IP
    }
}
NFT
}
kernel_pair_down() { "$ROOT/tools/topo.sh" --prefix "$KPREFIX" down >/dev/null 2>&1 || true; }

# ---- fedgate with one port kind ---------------------------------------------------------------
# The gateways' [dataplane] idle (topo.sh writes "backoff"), before they start.
lab_edit_configs() {
    sed -i "s/^idle = \"backoff\"/idle = \"$IDLE\"${YIELD_US:+\\nidle_yield_us = $YIELD_US}/" "$A_CONF" "$B_CONF"
}
fedgate_up() { # fedgate_up KIND
    LAB_PORTS=$1
    lab_up
    local m
    # What the figures are labelled with is what the gateways run with.
    for m in "$A_CONF" "$B_CONF"; do
        if grep -q '^args = \["--lcores", "\(0@0,\)\?1@(0-' "$m"; then [[ $GATEWAY_CPUS == float ]]; else [[ $GATEWAY_CPUS == pinned ]]; fi ||
            { echo "lab_bench: --gateway-cpus $GATEWAY_CPUS, but $m has $(grep '^args' "$m")" >&2; exit 1; }
    done
    for m in "$A_IPERF:$B_IPERF:$IPERF_PORT" "$A_SP:$B_SP:$SP_PORT" "$A_CPS:$B_CPS:$CPS_PORT"; do
        IFS=: read -r a b n <<<"$m"
        lab_ctl a map add import --cluster "b$a" --proto tcp --port "$a" --peer beta --peer-port "$b" >/dev/null
        lab_ctl b map add export --cluster "b$a" --proto tcp --port "$b" --node "$B_NODE_IP:$n" >/dev/null
    done
}
fedgate_down() { lab_down; }

# ---- the measurements, the same for every setup (node a -> its gateway's mapped ports) ----------
# Sets TPUT (Mbit/s), RTT (us), CPS (connections/s), CONNECT_P50 and CONNECT_P99 (us, connect()'s
# times), and CPS_GW_US (both fedgated's CPU time over the connect loops, us per connection; "-"
# for the kernel pair, whose forwarding is softirq work no process is charged for).
measure() {
    local label=$1 cps_out cpu0
    # Node a may reuse TIME_WAIT ports for new connections, as both setups see the same churn, and
    # has most of the port space for them: with the default 28K ports (half of them for connect()
    # first) and a port reusable 1 s after its TIME_WAIT began, one loop stopped near 14K
    # connections a second through either setup, whatever the gateways did.
    ip netns exec "$NS_A_NODE" sysctl -q -w net.ipv4.tcp_tw_reuse=1
    ip netns exec "$NS_A_NODE" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"
    ip netns exec "$NS_B_NODE" "${PIN[@]}" iperf3 -s -B "$B_NODE_IP" -p "$IPERF_PORT" >/dev/null 2>&1 &
    PIDS+=($!)
    ip netns exec "$NS_B_NODE" "${PIN[@]}" sockperf server --tcp -i "$B_NODE_IP" -p "$SP_PORT" >"$WORK/sp-server.log" 2>&1 &
    PIDS+=($!)
    # As many accepting processes as connect loops (forked after listen(), all on the one socket,
    # each gone with its parent), so the listener is not what a run of several loops measures.
    ip netns exec "$NS_B_NODE" "${PIN[@]}" python3 - "$B_NODE_IP" "$CPS_PORT" "$CPS_CLIENTS" >/dev/null 2>&1 <<'PY' &
import ctypes, os, signal, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(4096)
for _ in range(int(sys.argv[3]) - 1):
    if os.fork() == 0:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(0)
        break
while True:
    c, _ = s.accept()
    c.close()
PY
    PIDS+=($!)
    lab_wait "the servers on node b" bash -c "ip netns exec '$NS_B_NODE' ss -ltn | grep -q ':$IPERF_PORT' &&
        ip netns exec '$NS_B_NODE' ss -ltn | grep -q ':$SP_PORT' && ip netns exec '$NS_B_NODE' ss -ltn | grep -q ':$CPS_PORT'"
    # Through the port map end to end before timing anything (ARP, first sessions).
    lab_wait "a connection through the $label port map" ip netns exec "$NS_A_NODE" python3 -c \
        "import socket; socket.create_connection(('$A_IN_IP', $A_CPS), timeout=2).close()"

    ip netns exec "$NS_A_NODE" "${PIN[@]}" timeout $((SECS + 30)) iperf3 -c "$A_IN_IP" -p "$A_IPERF" -t "$SECS" -J >"$WORK/iperf.json" || true
    TPUT=$(python3 -c "import json; r = json.load(open('$WORK/iperf.json')); print(f\"{r['end']['sum_received']['bits_per_second'] / 1e6:.0f}\")" 2>/dev/null || echo 0)

    ip netns exec "$NS_A_NODE" "${PIN[@]}" timeout $((SECS + 30)) sockperf ping-pong --tcp -i "$A_IN_IP" -p "$A_SP" -t "$SECS" -m 64 \
        >"$WORK/sp.log" 2>&1 || true
    RTT=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/sp.log" | awk '/percentile 50.000 =/ { printf "%.1f", 2 * $NF; found = 1 } END { if (!found) print 0 }')

    cpu0=$(gateways_cpu_s)
    cps_out=$(ip netns exec "$NS_A_NODE" "${PIN[@]}" timeout $((SECS + 30)) python3 - "$A_IN_IP" "$A_CPS" "$SECS" "$CPS_CLIENTS" "$WORK" <<'PY' || echo 0 0 0
import array, os, socket, sys, time
host, port, secs, clients, work = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
# Each loop a process of its own (one interpreter each), started together; the count of all of
# them over the time from the start to the last one's end. Each loop keeps its connect() times
# (ns) and leaves them in a file of its own for the percentiles over all of them.
t0 = time.perf_counter()
end = t0 + secs
pipes = []
for i in range(clients):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        n = 0
        took = array.array("q")
        clock = time.perf_counter_ns
        try:
            while time.perf_counter() < end:
                a = clock()
                s = socket.create_connection((host, port), timeout=5)
                took.append(clock() - a)
                s.close()
                n += 1
            with open(f"{work}/connect-{i}.ns", "wb") as f:
                took.tofile(f)
        except OSError as e:
            print(f"connect loop: {e}", file=sys.stderr)
            n = -1
        os.write(w, str(n).encode())
        os._exit(0)
    os.close(w)
    pipes.append(r)
counts = []
for r in pipes:
    counts.append(int(os.read(r, 64) or b"-1"))
    os.close(r)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
if min(counts) < 0:
    sys.exit(1)  # a loop failed (it said why): no figure
rate = sum(counts) / (time.perf_counter() - t0)
took = array.array("q")
for i in range(clients):
    with open(f"{work}/connect-{i}.ns", "rb") as f:
        took.frombytes(f.read())
    os.unlink(f"{work}/connect-{i}.ns")
took = sorted(took)
if not took:
    sys.exit(1)
at = lambda q: took[min(len(took) - 1, int(q * len(took)))] / 1000
print(f"{rate:.0f} {at(0.50):.1f} {at(0.99):.1f} {len(took)}")
PY
)
    local made
    read -r CPS CONNECT_P50 CONNECT_P99 made <<<"$cps_out"
    CPS_GW_US=-
    if [[ -n $cpu0 ]] && ((${made:-0} > 0)); then
        CPS_GW_US=$(python3 -c "print(f'{($(gateways_cpu_s) - $cpu0) * 1e6 / $made:.0f}')")
    fi
    stop_pids
}

# PIDs' CPU time so far (utime + stime from /proc/PID/stat, seconds), summed.
pids_cpu_s() {
    python3 - "$@" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
total = 0
for pid in sys.argv[1:]:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    total += int(f[11]) + int(f[12])
print(total / tick)
PY
}

# Both fedgated's CPU time so far (seconds), summed; empty with no gateways up (the kernel pair).
gateways_cpu_s() {
    [[ -n ${LAB_PID_A:-} && -n ${LAB_PID_B:-} ]] && kill -0 "$LAB_PID_A" 2>/dev/null || return 0
    pids_cpu_s "$LAB_PID_A" "$LAB_PID_B"
}

# One process's CPU time over IDLE_S quiet seconds, as ms of CPU a second.
idle_cpu() {
    local t0 c0 t1 c1
    t0=$(date +%s.%N) c0=$(pids_cpu_s "$1")
    sleep "$IDLE_S"
    t1=$(date +%s.%N) c1=$(pids_cpu_s "$1")
    python3 -c "print(f'{($c1 - $c0) / ($t1 - $t0) * 1000:.1f}')"
}

echo "== lab_bench: $SECS s each, idle = $IDLE${YIELD_US:+, idle_yield_us = $YIELD_US}${NODES_CPU:+, node programs on CPU $NODES_CPU}${KERNEL_RPS:+, RPS on the kernel pair gateway veths to CPUs $KERNEL_RPS}, fedgate data planes $GATEWAY_CPUS, $CPS_CLIENTS connect loop(s), $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
kernel_pair_up
measure kernel
K_TPUT=$TPUT K_RTT=$RTT K_CPS=$CPS K_P50=$CONNECT_P50 K_P99=$CONNECT_P99
kernel_pair_down
echo "  kernel pair: $K_TPUT Mbit/s, round trip $K_RTT us, $K_CPS connections/s (connect p50 $K_P50 us, p99 $K_P99 us)"

ROWS=()
ratio() { python3 -c "a, b = float('$1'), float('$2'); print(f'{a / b:.2f}' if b > 0 else 'n/a')"; }
for kind in $KINDS; do
    fedgate_up "$kind"
    measure "fedgate $kind"
    # Quiet now: how much CPU the idle gateways burn.
    cpu_a=$(idle_cpu "$LAB_PID_A") cpu_b=$(idle_cpu "$LAB_PID_B")
    fedgate_down
    echo "  fedgate $kind: $TPUT Mbit/s, round trip $RTT us, $CPS connections/s (connect p50 $CONNECT_P50 us, p99 $CONNECT_P99 us; gateways' CPU $CPS_GW_US us a connection); idle CPU A $cpu_a ms/s, B $cpu_b ms/s"
    ROWS+=("$kind|$TPUT|$RTT|$CPS|$CONNECT_P50|$CONNECT_P99|$CPS_GW_US|$cpu_a|$cpu_b")
done

echo
echo "== lab comparison (fedgate / kernel pair; throughput and connections: higher is better, round trip: lower)"
# Connections per second, then connect()'s median and 99th percentile, then the gateways' CPU a
# connection (fedgate only).
row() { printf '| %-22s | %14s | %15s | %14s | %20s | %21s | %21s |\n' "$@"; }
row "setup" "iperf3 Mbit/s" "round trip us" "connections/s" "connect p50, p99 us" "gateways' CPU us/conn" "idle CPU ms/s (A, B)"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..24})" "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..17})" \
    "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..22})" "$(printf -- '-%.0s' {1..23})" "$(printf -- '-%.0s' {1..23})"
row "kernel pair (nftables)" "$K_TPUT" "$K_RTT" "$K_CPS" "$K_P50, $K_P99" "-" "-"
for row in "${ROWS[@]}"; do
    IFS='|' read -r kind t r c p50 p99 gw ca cb <<<"$row"
    row "fedgate $kind" "$t" "$r" "$c" "$p50, $p99" "$gw" "$ca, $cb"
    row "  ratio" "$(ratio "$t" "$K_TPUT")" "$(ratio "$r" "$K_RTT")" "$(ratio "$c" "$K_CPS")" \
        "$(ratio "$p50" "$K_P50"), $(ratio "$p99" "$K_P99")" "" ""
done

if ((SMOKE)); then
    # Only that every setup moved traffic of each kind (never how fast).
    for row in "kernel|$K_TPUT|$K_RTT|$K_CPS|$K_P50|$K_P99|-|0|0" "${ROWS[@]}"; do
        IFS='|' read -r kind t r c p50 p99 gw _ _ <<<"$row"
        for f in "$t" "$r" "$c" "$p50" "$p99"; do
            python3 -c "import sys; sys.exit(0 if float('${f:-0}') > 0 else 1)" ||
                { echo "lab_bench: $kind measured nothing (iperf3 $t, round trip $r, connections $c, connect p50 $p50 us, p99 $p99 us)" >&2; exit 1; }
        done
        # Through fedgate the gateways took some CPU for the connections they carried.
        [[ $kind == kernel ]] || python3 -c "import sys; sys.exit(0 if float('$gw') > 0 else 1)" ||
            { echo "lab_bench: fedgate $kind: no gateway CPU time over the connect loops ('$gw')" >&2; exit 1; }
    done
    echo "lab_bench: smoke run complete"
fi
