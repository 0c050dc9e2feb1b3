#!/usr/bin/env bash
# tests/bench/nat_bench.sh — port-map proxy speed beside the reference, on the same vdevs.
#
# For each flow count N (NAT_BENCH_FLOWS, default "1024 65536 1048576"): a pcap of one 64-byte TCP
# SYN per flow, node 198.18.1.x:sport -> 198.18.1.1:(8080 + i % M) (fedgate_bench_pcap --tcp-flows),
# is read by net_pcap (infinite_rx=1) and sent out of a net_null port, first by dpdk-testpmd in io
# mode, then by testpmd in 5tswap mode (swaps the MAC, IP and port pairs: a forwarder that touches
# the headers), then by fedgated, which translates it through M import mappings (tcp 8080+j -> peer
# beta 198.19.0.2:(9000+j)): the first pass over the file opens a session per flow, every later
# pass is the established-flow fast path. All three forward on lcore 1 for the same time; the
# figures are the ratios of packets per second sent on port 1. Only the EAL layout and the vdevs
# are shared.
#
# M = ceil(2 N / session ports), at least 1: a session port of the external address is shared by
# sessions toward different destinations (endpoint-dependent allocation), so M destinations give
# M x 63976 sessions; twice what N needs keeps the search for a port short. 1M flows: 33 mappings.
#
# For the largest N the first mapping (8080) is added at run time instead (fedgatectl map add),
# while nat.created is sampled about every millisecond over the management socket: every packet of
# that mapping then opens a session, which gives the daemon's new-session rate (with M > 1, in a
# table the other mappings' flows already fill).
#
# Memory: with hugepages when the machine can reserve them (root; NAT_BENCH_HUGE=1, the default
# outside --smoke): the script reserves 2 MB pages for the largest run, mounts hugetlbfs in its
# work directory, and gives both back at exit; otherwise --no-huge. The table says which.
#
# testpmd's rate: its port-1 TX counter from the stats it prints every second, each block stamped
# with the monotonic clock as it arrives, so a late block on a loaded machine does not inflate it.
#
# usage: nat_bench.sh BUILD_DIR [SECONDS]     (root; about 3 x SECONDS + start-up per N)
#        nat_bench.sh BUILD_DIR --smoke       (CI: 1024 flows, 5 s each, no hugepages; checks all forwarded)
#        nat_bench.sh BUILD_DIR --smoke-paired (CI: the paired turns, 1024 flows, 2 rounds of 1 s slices,
#                                               the build's fedgated as NAT_BENCH_FEDGATED_B too)
#   NAT_BENCH_FLOWS="1024 65536 1048576"   flow counts
#   NAT_BENCH_TP_MBUF_SIZE=2176            testpmd's --mbuf-size (fedgated's mbufs are 2176 bytes)
#   NAT_BENCH_HUGE=1                       0: --no-huge even where hugepages could be reserved
#   NAT_BENCH_ROUNDS=1                     runs of the whole set (io, 5tswap, fedgated for each flow
#                                          count), one after another; with more than one, each round's
#                                          rows and then the median ratio per flow count (this machine's
#                                          figures move by a third between runs)
#   NAT_BENCH_PACKETS=N                    packets in each pcap: at least the run's flow count (a
#                                          smaller value, or none, gives one packet a flow), packet j of
#                                          flow j % N; many stored packets over few flows set net_pcap's
#                                          replay of its stored copies apart from the sessions' cost
#   NAT_BENCH_FEDGATED=BUILD_DIR/controlplane/fedgated   the daemon measured: another build's binary
#                                          (a copy kept from before a change), so that two builds are
#                                          compared in runs alternated on the same machine; the table
#                                          names it when it is not the build directory's
#   NAT_BENCH_PAIRED=0                     R > 0: paired turns instead of runs one after another
#                                          (tests/bench/paired.py): testpmd io, testpmd 5tswap and
#                                          fedgated all up at once, stopped (SIGSTOP) but for the one
#                                          whose turn it is, each forwarding alone for a slice, R rounds
#                                          of a slice each; the ratio is the median of the rounds' own
#                                          ratios, each from slices seconds apart (on a shared VM the
#                                          rates of runs a minute apart move by a third). SECONDS is
#                                          not used then; no new-session rate is measured.
#   NAT_BENCH_SLICE=2                      paired: seconds of one slice (0.5..30)
#   NAT_BENCH_FEDGATED_B=PATH              paired: a second fedgated binary in the turns (another
#                                          build's), so that two builds are compared slice by slice;
#                                          with NAT_BENCH_INSNS, traced after the first
#   NAT_BENCH_INSNS=0                      K > 0: no timing and no testpmd; for each N the daemon's
#                                          instructions a packet in Dataplane::handle_burst (callees
#                                          included), counted exactly by stepping K bursts under gdb
#                                          (tests/bench/insn_trace.py) once every flow has its session:
#                                          a figure the machine's load does not move, for changes of a
#                                          few percent that timing on a shared VM cannot resolve
#   NAT_BENCH_INSNS_LISTING=DIR            with NAT_BENCH_INSNS: also every instruction executed, with
#                                          its count a packet, in address order (insn_trace.py's
#                                          TRACE_LISTING), to DIR/insns-N-LABEL.lst: where they go
#   NAT_BENCH_INSNS_FUNCTION=handle_burst  with NAT_BENCH_INSNS: what is stepped, K calls of it:
#                                          handle_burst (the packet work), or poll_once (a whole poll:
#                                          net_pcap's receive and net_null's send, the housekeeping,
#                                          the bursts; per packet taken in, so the framework's share
#                                          is poll_once's count less handle_burst's)
#        nat_bench.sh BUILD_DIR --smoke-insns  (CI: the instruction count, 1024 flows, one poll_once)
set -euo pipefail
BUILD=$(realpath "${1:?usage: nat_bench.sh BUILD_DIR [SECONDS] | --smoke}")
SMOKE=0
if [[ ${2:-} == --smoke ]]; then
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "EAL"
    SMOKE=1 SECS=5 FLOWS=1024 HUGE=0 ROUNDS=1 PAIRED=0
elif [[ ${2:-} == --smoke-paired ]]; then
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "EAL"
    # A second daemon (the same build) in the turns too, so that the comparison of builds is run.
    SMOKE=1 SECS=5 FLOWS=1024 HUGE=0 ROUNDS=1 PAIRED=2 SLICE=1 FEDGATED_B=$BUILD/controlplane/fedgated
elif [[ ${2:-} == --smoke-insns ]]; then
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "EAL, gdb attaching to the daemon"
    # A whole poll (resolve_bench.sh's --smoke-insns steps a burst): both ways of counting a
    # call's packets, and the PMDs' stripped code named by library, are run in CI.
    SMOKE=1 SECS=5 FLOWS=1024 HUGE=0 ROUNDS=1 PAIRED=0 INSNS=1 INSNS_FUNCTION=poll_once
else
    SECS=${2:-10}
    FLOWS=${NAT_BENCH_FLOWS:-1024 65536 1048576}
    HUGE=${NAT_BENCH_HUGE:-1}
    ROUNDS=${NAT_BENCH_ROUNDS:-1}
    PACKETS=${NAT_BENCH_PACKETS:-0}
    PAIRED=${NAT_BENCH_PAIRED:-0}
    SLICE=${NAT_BENCH_SLICE:-2}
    FEDGATED_B=${NAT_BENCH_FEDGATED_B:-}
    INSNS=${NAT_BENCH_INSNS:-0}
    LISTING=${NAT_BENCH_INSNS_LISTING:-}
    INSNS_FUNCTION=${NAT_BENCH_INSNS_FUNCTION:-handle_burst}
fi
INSNS=${INSNS:-0}
[[ $INSNS =~ ^[0-9]+$ ]] && ((INSNS <= 20)) ||
    { echo "nat_bench: NAT_BENCH_INSNS must be 0..20 (bursts to step through; 0: no instruction count), got '$INSNS'" >&2; exit 2; }
# shellcheck source=tests/bench/insn_trace.sh
source "$(dirname "$0")/insn_trace.sh"
insn_trace_knobs NAT_BENCH "$INSNS" "${LISTING:-}" "${INSNS_FUNCTION:=handle_burst}"
LISTING=$INSN_LISTING
((INSNS == 0 || PAIRED == 0)) || { echo "nat_bench: NAT_BENCH_INSNS and NAT_BENCH_PAIRED are two different runs: set one" >&2; exit 2; }
SLICE=${SLICE:-2}
FEDGATED_B=${FEDGATED_B:-}
[[ $PAIRED =~ ^[0-9]+$ ]] && ((PAIRED <= 100)) ||
    { echo "nat_bench: NAT_BENCH_PAIRED must be 0..100 (rounds of paired slices; 0: runs one after another), got '$PAIRED'" >&2; exit 2; }
[[ $SLICE =~ ^[0-9]+(\.[0-9]+)?$ ]] && python3 -c "import sys; sys.exit(not 0.5 <= float(sys.argv[1]) <= 30)" "$SLICE" ||
    { echo "nat_bench: NAT_BENCH_SLICE must be 0.5..30 seconds, got '$SLICE'" >&2; exit 2; }
if [[ -n $FEDGATED_B ]]; then
    ((PAIRED > 0 || INSNS > 0)) ||
        { echo "nat_bench: NAT_BENCH_FEDGATED_B needs NAT_BENCH_PAIRED (the two builds take turns) or NAT_BENCH_INSNS" >&2; exit 2; }
    [[ -x $FEDGATED_B ]] || { echo "nat_bench: NAT_BENCH_FEDGATED_B '$FEDGATED_B' is not an executable file" >&2; exit 2; }
fi
PACKETS=${PACKETS:-0}
[[ $PACKETS =~ ^[0-9]+$ ]] && ((PACKETS <= 16777216)) ||
    { echo "nat_bench: NAT_BENCH_PACKETS must be 0..16777216, got '$PACKETS'" >&2; exit 2; }
packets_for() { echo $(($1 > PACKETS ? $1 : PACKETS)); }
[[ $ROUNDS =~ ^[0-9]+$ ]] && ((ROUNDS >= 1 && ROUNDS <= 20)) ||
    { echo "nat_bench: NAT_BENCH_ROUNDS must be 1..20, got '$ROUNDS'" >&2; exit 2; }
TP_MBUF_SIZE=${NAT_BENCH_TP_MBUF_SIZE:-2176}
FEDGATED=$BUILD/controlplane/fedgated
((SMOKE)) || FEDGATED=${NAT_BENCH_FEDGATED:-$FEDGATED}
[[ -x $FEDGATED ]] || { echo "nat_bench: NAT_BENCH_FEDGATED '$FEDGATED' is not an executable file" >&2; exit 2; }
[[ $SECS =~ ^[0-9]+$ ]] && ((SECS >= 3)) || { echo "nat_bench: SECONDS must be >= 3" >&2; exit 2; }
for n in $FLOWS; do
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 4000000)) || { echo "nat_bench: flow count '$n' must be 1..4000000" >&2; exit 2; }
done
[[ $TP_MBUF_SIZE =~ ^[0-9]+$ ]] && ((TP_MBUF_SIZE >= 256)) || { echo "nat_bench: NAT_BENCH_TP_MBUF_SIZE must be >= 256" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "nat_bench: run as root (EAL)" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "nat_bench: dpdk-testpmd not found (apt-get install dpdk-dev)" >&2; exit 1; }
((INSNS == 0)) || command -v gdb >/dev/null || { echo "nat_bench: NAT_BENCH_INSNS needs gdb (tools/deps.sh installs it)" >&2; exit 1; }
for b in tests/fedgate_bench_pcap controlplane/fedgated tools/fedgatectl; do
    [[ -x $BUILD/$b ]] || { echo "nat_bench: $BUILD/$b missing: build first" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/fedgate-natbench.XXXXXX)
TP_PREFIX=fgnat-tp-$$
FG_PREFIX=fgnat-fg-$$
PIDS=()
stop_all() {
    local p
    # A daemon stopped for the paired turns takes its SIGINT once it is continued.
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -INT "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
source "$(dirname "$0")/huge.sh"
# shellcheck source=tests/bench/testpmd_rate.sh
source "$(dirname "$0")/testpmd_rate.sh"
bench_huge_init
cleanup() {
    stop_all
    bench_huge_release
    rm -rf "$WORK" "/var/run/dpdk/$TP_PREFIX" "/var/run/dpdk/$FG_PREFIX" "/var/run/dpdk/$FG_PREFIX-b" "/var/run/dpdk/$TP_PREFIX-io" \
        "/var/run/dpdk/$TP_PREFIX-5tswap"
}
trap cleanup EXIT

MAPPED_PORT=8080
PORT_RANGE_LO=1024 PORT_RANGE_HI=64999
RESOLVE_PORT=65535 AUTO_PORTS=65000-65534  # out of the session ports' way
POOL_PORTS=$((PORT_RANGE_HI - PORT_RANGE_LO + 1))
NULL_VDEV="net_null0,no-rx=1"
# The largest N measures the new-session rate too.
NEWSESS_N=$(tr ' ' '\n' <<<"$FLOWS" | sort -n | tail -1)
# Memory for the EAL: net_pcap's infinite_rx keeps a copy of every packet of the file in an mbuf for
# the whole run, so the pool holds N mbufs plus working room.
mbuf_count() { echo $(($1 + 32768)); }
mappings_for() { local m=$(((2 * $1 + POOL_PORTS - 1) / POOL_PORTS)); echo $((m < 1 ? 1 : m)); }

# Hugepages for the largest run, if the machine gives them: for one forwarder (testpmd and fedgated
# take turns), or for all of them with the paired turns.
if ((HUGE)); then
    MAX_N=$(tr ' ' '\n' <<<"$FLOWS" | sort -n | tail -1)
    HUGE_MB=$(eal_mb "$(mbuf_count "$(packets_for "$MAX_N")")" "$((TP_MBUF_SIZE > 2176 ? TP_MBUF_SIZE : 2176))" huge)
    ((PAIRED == 0)) || HUGE_MB=$((HUGE_MB * (3 + (${#FEDGATED_B} > 0))))
    bench_huge_reserve "$WORK/huge" "$HUGE_MB" nat_bench
fi
[[ $FEDGATED == "$BUILD/controlplane/fedgated" ]] || MEMORY="$MEMORY; fedgated: $FEDGATED"
echo "nat_bench: $MEMORY"

# Everything the script runs beside the forwarding lcore stays on CPU 0, off the measured core.
ctl() { taskset -c 0 "$BUILD/tools/fedgatectl" --socket "$WORK/fedgated.sock" "$@"; }
# One stats sample as "t tx_packets translated rx_packets drops created sessions": t in seconds.
sample() {
    ctl stats --json | taskset -c 0 python3 -c '
import json, sys, time
r = json.load(sys.stdin); n = r["nat"]
print(time.monotonic(), r["ports"][1]["tx_packets"], n["translated"], r["ports"][0]["rx_packets"],
      sum(p["drops"] for p in r["ports"]), n["created"], n["sessions"])'
}

# The new-session rate: samples nat.created over the management socket (one request per connection,
# as fedgatectl does) while `fedgatectl map add` publishes the mapping; every packet of the file
# opens a session until the port pool is empty. Prints "new_sessions CREATED SLOPE LOWER_BOUND
# SAMPLES_INSIDE MS_BETWEEN_SAMPLES".
measure_new_sessions() {
    taskset -c 0 python3 - "$WORK/fedgated.sock" "$BUILD/tools/fedgatectl" "$MAPPED_PORT" <<'PY'
import json, socket, subprocess, sys, time
sock_path, ctl, port = sys.argv[1:]
period = 0.0005  # between samples: leave the control threads on CPU 0 time to breathe
def created():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    t0 = time.monotonic()
    s.sendall(b'{"cmd":"stats"}\n')
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk: break
        buf += chunk
    t1 = time.monotonic()
    s.close()
    r = json.loads(buf)
    r = r.get("result", r)
    return (t0 + t1) / 2, r["nat"]["created"]
base = created()[1]
add = subprocess.Popen([ctl, "--socket", sock_path, "map", "add", "import", "--cluster", "bench", "--proto", "tcp",
                        "--port", port, "--peer", "beta", "--peer-port", "9000"], stdout=subprocess.DEVNULL)
samples = []
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    t, c = created()
    samples.append((t, c - base))
    time.sleep(period)
    # done once the count has stood still for 100 ms after it started
    if c > base and len(samples) > 2:
        still = [s for s in samples if s[0] >= t - 0.1]
        if still[0][1] == c - base and t - samples[0][0] > 0.2 and len(still) > 3: break
if add.wait() != 0:
    print("new_sessions error: fedgatectl map add failed"); sys.exit(0)
final = samples[-1][1]
# Inside the creating phase: strictly between the last sample at 0 and the first at the final count.
last_zero = max(i for i, s in enumerate(samples) if s[1] == 0) if samples[0][1] == 0 else None
first_full = min(i for i, s in enumerate(samples) if s[1] == final)
inside = samples[(last_zero + 1 if last_zero is not None else 0):first_full]
slope = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if len(inside) >= 2 else 0
bound = final / (samples[first_full][0] - samples[last_zero][0]) if last_zero is not None else 0
gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
print(f"new_sessions {final} {int(slope)} {int(bound)} {len(inside)} {1e3 * sum(gaps) / max(1, len(gaps)):.2f}")
PY
}

# testpmd in MODE on the current N's vdevs, lcore 1; sets TP_PPS to its port-1 TX rate (packets
# per second). Not run in a subshell, so the trap can stop it.
run_testpmd() {
    local mode=$1 mb
    mb=$(eal_mb "$MBUFS" "$TP_MBUF_SIZE")
    # Line-buffered, so the wait below sees the first stats block when it is printed.
    # Each line stamped with the monotonic clock (on CPU 0) as it arrives.
    # shellcheck disable=SC2046 # eal_mem_args is several words on purpose
    stdbuf -oL dpdk-testpmd -l 0,1 $(eal_mem_args "$mb") --no-shconf --no-pci --log-level lib.eal:error \
        --file-prefix "$TP_PREFIX" --vdev "$RX_VDEV" --vdev "$NULL_VDEV" -- \
        --forward-mode="$mode" --nb-cores=1 --auto-start --stats-period 1 --total-num-mbufs="$MBUFS" \
        --mbuf-size="$TP_MBUF_SIZE" --no-mlockall > >(testpmd_stamp >"$WORK/testpmd-$mode.log") 2>&1 &
    PIDS+=($!)
    # Loading the file into mbufs takes a while for large N: time from the first stats block.
    testpmd_run_window "$WORK/testpmd-$mode.log" 1 "${PIDS[0]}" "$SECS" 3000
    stop_all
    local pps
    pps=$(testpmd_tx_rate "$WORK/testpmd-$mode.log" 1)
    if [[ $pps == 0 ]]; then
        echo "nat_bench: testpmd $mode measured nothing for N=$N; its log:" >&2
        grep -E "TX-packets|statistics for port|rror" "$WORK/testpmd-$mode.log" | head -20 >&2; tail -5 "$WORK/testpmd-$mode.log" >&2
    fi
    rm -rf "/var/run/dpdk/$TP_PREFIX"
    TP_PPS=$pps
}

# fedgated's configuration for the current N as $WORK/bench$1.toml ($1: "" or "-b", a second
# daemon's), its socket $WORK/fedgated$1.sock, its data plane on lcore 1, never sleeping; $2 = 1: the
# first mapping left out (the largest N's, added at run time for the new-session rate).
fg_config() {
    FG_MBUFS=$MBUFS
    ((FG_MBUFS <= 4194304)) || FG_MBUFS=4194304
    FG_MB=$(eal_mb "$FG_MBUFS" 2176)
    MAX_SESSIONS=$((N < 1024 ? 1024 : N))
    local import="" j
    for ((j = $2; j < M; j++)); do
        import+=$'[[import]]\ncluster = "bench"\nproto = "tcp"\nport = '"$((MAPPED_PORT + j))"$'\npeer = "beta"\npeer_port = '"$((9000 + j))"$'\n'
    done
    rm -rf "$WORK/state$1"
    cat >"$WORK/bench$1.toml" <<TOML
[gateway]
party = "bench"
party_id = 1
socket = "$WORK/fedgated$1.sock"
state_dir = "$WORK/state$1"
[eal]
args = ["-l", "0,1", $(eal_mem_args "$FG_MB" | sed 's/[^ ]*/"&",/g') "--no-shconf", "--no-pci", "--file-prefix", "$FG_PREFIX$1", "--log-level", "lib.eal:error"]
[dataplane]
idle = "spin"
mbufs = $FG_MBUFS
[nat]
port_range = "$PORT_RANGE_LO-$PORT_RANGE_HI"
max_sessions = $MAX_SESSIONS
[resolve]
port = $RESOLVE_PORT
[connect]
auto_ports = "$AUTO_PORTS"
[[port]]
name = "internal"
role = "internal"
device = "$RX_VDEV"
address = "198.18.1.1/24"
[[port]]
name = "external"
role = "external"
device = "$NULL_VDEV"
address = "198.19.0.1/24"
static_neighbours = ["198.19.0.2 02:00:00:00:00:02"]
[[peer]]
party = "beta"
party_id = 2
address = "198.19.0.2"
key = "6b1d3e8a2f4c7a9e0d5b8c1f3a6e9d2c4b7f0a3e6d9c2b5f8e1a4d7c0b3e6f92"
$import
TOML
}

# Starts the binary $1 on $WORK/bench$2.toml and waits until its socket answers: FG_PID its pid.
# Fails (saying why, with its log) if it exits or does not answer in 300 s.
fg_start() {
    local i
    "$1" --config "$WORK/bench$2.toml" >"$WORK/fedgated$2.log" 2>&1 &
    FG_PID=$!
    PIDS+=("$FG_PID")
    for i in $(seq 3000); do
        taskset -c 0 "$BUILD/tools/fedgatectl" --socket "$WORK/fedgated$2.sock" status >/dev/null 2>&1 && return 0
        kill -0 "$FG_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "nat_bench: fedgated ($1) did not come up for N=$N; its log:" >&2
    tail -20 "$WORK/fedgated$2.log" >&2
    return 1
}

# testpmd's command line in interactive mode for the paired turns (paired.py starts it), as JSON.
tp_argv_json() {
    testpmd_interactive_argv "$1" "$(eal_mb "$MBUFS" "$TP_MBUF_SIZE")" "$TP_PREFIX-$1" "$RX_VDEV" "$NULL_VDEV" \
        "$MBUFS" "$TP_MBUF_SIZE"
}

# The paired turns for the current N (NAT_BENCH_PAIRED): every forwarder up, each stopped until its
# turn; paired.py's summary in $WORK/paired-$N-$round.txt, nat.sessions of the first daemon after it.
run_paired() {
    local args=() out="$WORK/paired-$N-$1.txt"
    fg_config "" 0
    fg_start "$FEDGATED" "" || { stop_all; return 1; }
    args+=(--fedgated fedgated "$FG_PID" "$WORK/fedgated.sock")
    sleep 2  # its first pass over the file opens the sessions
    kill -STOP "$FG_PID"
    if [[ -n $FEDGATED_B ]]; then
        fg_config "-b" 0
        fg_start "$FEDGATED_B" "-b" || { stop_all; return 1; }
        args+=(--fedgated fedgated_b "$FG_PID" "$WORK/fedgated-b.sock" --also-against fedgated)
        sleep 2
        kill -STOP "$FG_PID"
    fi
    if ! taskset -c 0 /usr/bin/python3 "$(dirname "$0")/paired.py" --rounds "$PAIRED" --seconds "$SLICE" \
        --warmup 2 --port 1 --reference 5tswap --testpmd io "$(tp_argv_json io)" \
        --testpmd 5tswap "$(tp_argv_json 5tswap)" "${args[@]}" >"$out"; then
        stop_all
        return 1
    fi
    sed 's/^/   /' "$out"
    ctl stats --json | python3 -c 'import json, sys; print("sessions", json.load(sys.stdin)["nat"]["sessions"])' >>"$out"
    stop_all
    rm -rf "/var/run/dpdk/$FG_PREFIX" "/var/run/dpdk/$FG_PREFIX-b" "/var/run/dpdk/$TP_PREFIX-io" "/var/run/dpdk/$TP_PREFIX-5tswap"
}

# The instruction count for the current N (NAT_BENCH_INSNS): each daemon alone, its sessions all
# open, then stepped through INSNS bursts; adds "N LABEL PACKETS PER_PACKET" to INSN_RESULTS.
run_insns() {
    local label bin out i sessions=0
    for label in fedgated ${FEDGATED_B:+fedgated_b}; do
        bin=$FEDGATED
        [[ $label == fedgated_b ]] && bin=$FEDGATED_B
        fg_config "" 0
        fg_start "$bin" "" || { stop_all; return 1; }
        # Every flow's session open (the first pass over the file), so the bursts traced are the
        # established path's.
        for i in $(seq 1200); do
            read -r _ _ _ _ _ _ sessions < <(sample)
            ((sessions >= N)) && break
            sleep 0.1
        done
        if ((sessions < N)); then
            echo "nat_bench: $label opened $sessions of $N sessions in 2 minutes" >&2
            stop_all
            return 1
        fi
        out="$WORK/insns-$N-$label.txt"
        insn_trace "$FG_PID" "$INSNS" "$out" "${LISTING:+$LISTING/insns-$N-$label.lst}" "$INSNS_FUNCTION" ||
            { stop_all; return 1; }
        stop_all
        rm -rf "/var/run/dpdk/$FG_PREFIX"
        echo "   $label: $(insn_trace_field "$out" per_packet) instructions a packet; by function:"
        insn_trace_functions "$out" "$(insn_trace_functions_shown "$INSNS_FUNCTION")"
        [[ -z $LISTING ]] || echo "   every instruction: $LISTING/insns-$N-$label.lst"
        INSN_RESULTS+=("$N $label $(insn_trace_field "$out" packets) $(insn_trace_field "$out" per_packet)")
    done
}

RESULTS=()
INSN_RESULTS=()
RUNS=()
for ((round = 0; round < ROUNDS; round++)); do RUNS+=($FLOWS); done
for run in "${!RUNS[@]}"; do
    N=${RUNS[run]}
    PCAP="$WORK/nat-$N.pcap"
    M=$(mappings_for "$N")
    P=$(packets_for "$N")
    "$BUILD/tests/fedgate_bench_pcap" --tcp-flows "$PCAP" 198.18.1.1 "$MAPPED_PORT" "$N" "$M" "$P"
    RX_VDEV="net_pcap0,rx_pcap=$PCAP,infinite_rx=1"
    MBUFS=$(mbuf_count "$P")
    echo "== N = $N flows, $M mapping(s), $P packets in the file: $MBUFS mbufs"
    if ((INSNS)); then
        run_insns || echo "nat_bench: the instruction count failed for N=$N" >&2
        continue
    fi
    if ((PAIRED)); then
        run_paired "$run" || echo "nat_bench: the paired turns failed for N=$N" >&2
        continue
    fi

    # --- the references: testpmd io and 5tswap forwarding port 0 -> port 1 on lcore 1 ---
    run_testpmd io
    tp_io=$TP_PPS
    run_testpmd 5tswap
    tp_swap=$TP_PPS
    echo "   testpmd: io $tp_io pps, 5tswap $tp_swap pps"

    # --- fedgated on the same vdevs ---
    first=0
    [[ $N == "$NEWSESS_N" ]] && first=1
    fg_config "" "$first"
    if ! fg_start "$FEDGATED" ""; then
        stop_all
        RESULTS+=("$N 0 $tp_io $tp_swap 0 0 0 0 $M - - - - -")
        continue
    fi
    newsess="- - - - -"
    if [[ $N == "$NEWSESS_N" ]]; then
        sleep 1  # the data plane drops what no mapping serves yet (l4_unhandled)
        line=$(measure_new_sessions)
        [[ $line == new_sessions\ * ]] && newsess=${line#new_sessions } || echo "$line" >&2
    fi
    sleep 2  # the same warm-up testpmd's first two periods get
    read -r t0 tx0 tr0 rx0 d0 _ _ < <(sample)
    sleep $((SECS - 2))
    read -r t1 tx1 tr1 rx1 d1 created sessions < <(sample)
    ctl stats --json >"$WORK/stats-$N.json"
    stop_all
    rm -rf "/var/run/dpdk/$FG_PREFIX"
    fg_pps=$(python3 -c "print(int(($tx1 - $tx0) / ($t1 - $t0)))")
    tr_pps=$(python3 -c "print(int(($tr1 - $tr0) / ($t1 - $t0)))")
    rx_pps=$(python3 -c "print(int(($rx1 - $rx0) / ($t1 - $t0)))")
    drop_pps=$(python3 -c "print(int(($d1 - $d0) / ($t1 - $t0)))")
    python3 - "$WORK/stats-$N.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); n = r["nat"]
reasons = {k: v for k, v in r["drops_by_reason"].items() if v}
print(f"   fedgated nat: sessions {n['sessions']} created {n['created']} refused_full {n['refused_full']} "
      f"port_alloc_miss {n['port_alloc_miss']} translated {n['translated']} fast_path {n['fast_path']}")
print(f"   fedgated drops by reason (whole run): {reasons or 'none'}")
PY
    RESULTS+=("$N $fg_pps $tp_io $tp_swap $tr_pps $rx_pps $drop_pps $sessions $M $newsess")
done

if ((INSNS)); then
    python3 - "$INSNS" "$FEDGATED" "$FEDGATED_B" "$INSNS_FUNCTION" "${INSN_RESULTS[@]}" <<'PY'
import sys
calls, a, b, function, *rows = sys.argv[1:]
per = {}
for row in rows:
    n, label, packets, x = row.split()
    per.setdefault(int(n), {})[label] = (int(packets), float(x))
what = "burst(s)" if function == "handle_burst" else "poll(s)"
print(f"instructions a packet in Dataplane::{function}, callees included, from {calls} {what} stepped under gdb")
print(f"once every flow has its session (tests/bench/insn_trace.py); fedgated: {a}" + (f"; fedgated_b: {b}" if b else ""))
print(f"  {'flows':>8} {'packets':>8} {'fedgated':>9}" + (f" {'fedgated_b':>10} {'b/fedgated':>10}" if b else ""))
for n in sorted(per):
    p, x = per[n].get("fedgated", (0, 0.0))
    line = f"  {n:>8} {p:>8} {x:>9.1f}"
    if b:
        _, y = per[n].get("fedgated_b", (0, 0.0))
        line += f" {y:>10.1f} {y / x if x else 0:>10.3f}"
    print(line)
PY
    if ((SMOKE)); then
        read -r _ _ packets per <<<"${INSN_RESULTS[0]:-}"
        [[ ${packets:-0} -gt 0 && ${per:-0} =~ ^[0-9]+\.[0-9]$ ]] ||
            { echo "nat_bench: the instruction count gave nothing (packets '${packets:-}', per packet '${per:-}')" >&2; exit 1; }
        echo "nat_bench: smoke run complete"
    fi
    exit 0
fi

if ((PAIRED)); then
    paired_ok=0
    python3 - "$WORK" "$PAIRED" "$SLICE" "$MEMORY" "$FEDGATED_B" "${RUNS[@]}" <<'PY' || paired_ok=1
import os, sys
from statistics import median
work, rounds, slice_s, memory, b = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] != ""
print()
print(f"64-byte TCP SYNs, net_pcap infinite_rx -> net_null, lcore 1, {memory}; Mpps sent on port 1;")
print(f"  paired turns (tests/bench/paired.py): {rounds} rounds of a {slice_s} s slice each for testpmd io,")
print("  testpmd 5tswap, fedgated" + (f" and fedgated_b ({sys.argv[5]})" if b else "") + ": all up at once, each stopped")
print("  but in its turn; rates are the medians of the slices, ratios the medians of each round's own")
print("  ratio (lowest-highest) [an interval holding that median with at least 95% probability: a")
print("  difference between the builds is measured where b/fedgated's leaves out 1]")
rows, ok = [], True
for run, n in enumerate(sys.argv[6:]):
    rate, ratio, sessions = {}, {}, "-"
    path = f"{work}/paired-{n}-{run}.txt"
    for line in open(path) if os.path.exists(path) else []:
        w = line.split()
        if w[0] == "rate": rate[w[1]] = int(w[2])
        elif w[0] == "ratio" and w[3] != "-":
            ci = tuple(float(x) for x in w[6:8]) if len(w) >= 8 and w[6] != "-" else None
            ratio[(w[1], w[2])] = (float(w[3]), float(w[4]), float(w[5]), ci)
        elif w[0] == "sessions": sessions = w[1]
    rows.append((n, rate, ratio, sessions))
    ok = ok and all(rate.get(k, 0) > 0 for k in ("io", "5tswap", "fedgated") + (("fedgated_b",) if b else ()))
two = any("fedgated_b" in r[1] for r in rows)
print(f"{'flows':>9} {'fedgated':>9} {'5tswap':>7} {'io':>7} {'/5tswap (range) [95%]':>32} {'/io':>5}"
      + (f" {'fedgated_b':>10} {'b/5tswap (range) [95%]':>32} {'b/fedgated (range) [95%]':>32}" if two else "") + f" {'sessions':>9}")
def cell(r): return f"{r[0]:.2f} ({r[1]:.2f}-{r[2]:.2f})" + (f" [{r[3][0]:.2f}-{r[3][1]:.2f}]" if r[3] else "") if r else "-"
for n, rate, ratio, sessions in rows:
    line = (f"{n:>9} {rate.get('fedgated', 0) / 1e6:>9.2f} {rate.get('5tswap', 0) / 1e6:>7.2f} {rate.get('io', 0) / 1e6:>7.2f} "
            f"{cell(ratio.get(('fedgated', '5tswap'))):>32} {rate.get('fedgated', 0) / rate['io'] if rate.get('io') else 0:>5.2f}")
    if two:
        line += (f" {rate.get('fedgated_b', 0) / 1e6:>10.2f} {cell(ratio.get(('fedgated_b', '5tswap'))):>32}"
                 f" {cell(ratio.get(('fedgated_b', 'fedgated'))):>32}")
    print(line + f" {sessions:>9}")
sys.exit(0 if ok else 1)
PY
    if ((SMOKE)); then
        ((paired_ok == 0)) || { echo "nat_bench: a forwarder of the paired turns forwarded nothing" >&2; exit 1; }
        echo "nat_bench: smoke run complete"
    fi
    exit "$paired_ok"
fi

python3 - "$POOL_PORTS" "$TP_MBUF_SIZE" "$MEMORY" "$PACKETS" "${RESULTS[@]}" <<'PY'
import sys
pool, mbuf, memory, packets = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = [r.split() for r in sys.argv[5:]]
print()
print(f"64-byte TCP SYNs, net_pcap infinite_rx -> net_null, lcore 1, {memory}; Mpps sent on port 1")
if packets:
    print(f"  each file holds at least {packets:,} packets (NAT_BENCH_PACKETS), packet j of flow j % flows")
print(f"  io, 5tswap: dpdk-testpmd in that forwarding mode on the same vdevs in the same run (--mbuf-size {mbuf});")
print("  ratios: fedgated / 5tswap and fedgated / io; translated, fg rx, fg drops: fedgated's nat.translated,")
print("  port-0 rx_packets and dropped packets per second (Mpps); sessions: nat.sessions at the end;")
print(f"  maps: import mappings (destinations) the flows are spread over ({pool} session ports each)")
print(f"{'flows':>9} {'maps':>4} {'fedgated':>9} {'5tswap':>7} {'io':>7} {'/5tswap':>7} {'/io':>5} {'translated':>10} "
      f"{'fg rx':>7} {'fg drops':>8} {'sessions':>9}")
for r in rows:
    n, fg, io, sw, tr, rx, drops, sessions, maps = (int(x) for x in r[:9])
    rs = f"{fg / sw:.2f}" if sw else "-"
    ri = f"{fg / io:.2f}" if io else "-"
    note = "" if sessions == n else f"  <- {n - sessions} flows without a session" if sessions else "  <- failed"
    print(f"{n:>9} {maps:>4} {fg / 1e6:>9.2f} {sw / 1e6:>7.2f} {io / 1e6:>7.2f} {rs:>7} {ri:>5} {tr / 1e6:>10.2f} "
          f"{rx / 1e6:>7.2f} {drops / 1e6:>8.2f} {sessions:>9}{note}")
if len(rows) > len({r[0] for r in rows}):  # NAT_BENCH_ROUNDS > 1: the middle of each flow count's runs
    from statistics import median
    for n in dict.fromkeys(r[0] for r in rows):
        runs = [(int(r[1]), int(r[3])) for r in rows if r[0] == n and int(r[3]) and int(r[1])]
        if runs:
            ratios = sorted(fg / sw for fg, sw in runs)
            print(f"median of {len(runs)} rounds, {n} flows: fedgated {median(fg for fg, _ in runs) / 1e6:.2f} Mpps, "
                  f"/5tswap {median(ratios):.2f} (from {ratios[0]:.2f} to {ratios[-1]:.2f})")
for r in rows:
    if r[9] != "-":
        final, slope, bound, inside, gap = int(r[9]), int(r[10]), int(r[11]), int(r[12]), r[13]
        print(f"new sessions (N={r[0]}, mapping {8080} added at run time): {final} created; "
              f"{slope / 1e6:.2f} M/s over {inside} samples inside the creating phase "
              f"(at least {bound / 1e6:.2f} M/s on average; samples every {gap} ms)")
PY
# Smoke mode checks that all three forwarded and the table was printed (never how fast).
if ((SMOKE)); then
    read -r _ fg io sw _ <<<"${RESULTS[0]}"
    for v in "$fg" "$io" "$sw"; do
        [[ $v =~ ^[0-9]+$ && $v -gt 0 ]] ||
            { echo "nat_bench: fedgated ($fg pps), testpmd io ($io) or 5tswap ($sw) forwarded nothing" >&2; exit 1; }
    done
    echo "nat_bench: smoke run complete"
fi
