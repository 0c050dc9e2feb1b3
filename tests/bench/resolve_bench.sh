#!/usr/bin/env bash
# tests/bench/resolve_bench.sh — the resolution service's speed, in four parts.
#
# 1. Cache hits on the data plane beside the reference, on the same vdevs. A pcap of RECORDS
#    REGISTER messages (read once, net_pcap1) fills fedgated's directory; a pcap of REQUESTS RESOLVE
#    messages for those records (net_pcap0, infinite_rx=1) is answered from the cache by the lcore,
#    the replies leaving by a net_null port whose 16 requesters are static neighbours (no ARP).
#    dpdk-testpmd on the same net_pcap0 -> net_null0 is the reference, in io mode (every request
#    passed on untouched) and in 5tswap mode, the one the aim is set against (every request sent
#    straight back out with MACs, addresses and ports swapped: no lookup, no new reply of 122 bytes
#    built). All on lcore 1 for the same time; the figures are the ratios of packets sent per second.
# 2. Miss latency across namespaces: a three-party lab (tools/lab.sh). C does not announce, so A's
#    node resolving C's processes is a directed query A -> C; party-0 targets are broadcast (B has
#    them, C says not here); B's processes are announced, so they are cache hits at A. Beside them:
#    the kernel ping node -> gateway A and fedgatectl ping A -> C (the gateways' own round trips).
# 3. Announce time and memory per record: gateway A is stopped, B's node registers 100K (and, with
#    RESOLVE_BENCH_BIG=1, the default, then 1M more) records, A is started again and timed until its
#    cache holds every record of B's; A's VmRSS before and after gives bytes per record (--no-huge
#    EAL memory is allocated at start, so the growth is the cache and the control structures).
#    B's registration rate falls as its directory grows (from ~30K/s to ~1K/s at 300K records on
#    the 2-core machine), so the 1M step stops registering after RESOLVE_BENCH_REG_LIMIT_S and
#    measures the announce with what B holds then; the result lines say so.
# 4. Registrations at a member of a gateway group beside a gateway alone: A's node registers a burst
#    at A alone; then a three-member etcd (tests/integration/lib_etcd.sh, on this machine; one
#    member with RESOLVE_BENCH_ETCD_MEMBERS=1, so that the store's work lands on these CPUs once) is
#    brought up, A restarted as the only member of a group on it ([cluster], active), and the same
#    burst registered again, every registration written to the store before it is answered. The
#    figure is the ratio of the two rates (alone / member; the aim is at most 2). A then runs alone
#    again. Skipped, saying so, when etcd or etcdctl is not installed (tools/deps.sh installs them).
#
# usage: resolve_bench.sh BUILD_DIR [SECONDS]     (root; about 4 minutes, at most ~10)
#        resolve_bench.sh BUILD_DIR --smoke       (CI: every part at tiny sizes, the knobs below
#                                                  ignored; checks each part produced its figures)
#        resolve_bench.sh BUILD_DIR --smoke-paired (CI: part 1 alone in paired turns, 2 rounds of 1 s)
#        resolve_bench.sh BUILD_DIR --smoke-insns  (CI: part 1's instruction count, one burst)
#   RESOLVE_BENCH_RECORDS=1024      part 1: records registered (from 4096 up, fedgated's [dataplane]
#                                   punt_ring is set above it: the registrations are read at once)
#   RESOLVE_BENCH_REQUESTS=4096     part 1: resolve requests in the replayed pcap
#   RESOLVE_BENCH_ROUNDS=1          part 1: runs of the three (testpmd io, 5tswap, fedgated), 1..20; with
#                                   more than one, each round's figures and then the medians (the
#                                   reference alone moves by half between runs on a busy machine)
#   RESOLVE_BENCH_FEDGATED=BUILD_DIR/controlplane/fedgated   part 1: the daemon measured (another
#                                   build's binary, to compare two builds in alternated runs)
#   RESOLVE_BENCH_PAIRED=0          part 1: R > 0: paired turns (tests/bench/paired.py, as nat_bench.sh's
#                                   NAT_BENCH_PAIRED): testpmd io, testpmd 5tswap and fedgated all up at
#                                   once, each stopped but in its turn, R rounds of a slice each; the
#                                   ratio is the median of the rounds' own (SECONDS and ROUNDS unused)
#   RESOLVE_BENCH_SLICE=2           part 1, paired: seconds of one slice (0.5..30)
#   RESOLVE_BENCH_FEDGATED_B=PATH   part 1, paired: a second fedgated binary in the turns (another
#                                   build's, its own directory filled the same way), so that two
#                                   builds are compared slice by slice ("ratio fedgated_b/fedgated")
#   RESOLVE_BENCH_INSNS=0           part 1: K > 0: no timing, no testpmd and no other part; the cache
#                                   hit's instructions a packet in Dataplane::handle_burst (callees
#                                   included), counted exactly by stepping K bursts of requests under
#                                   gdb (tests/bench/insn_trace.py) once the directory is full and
#                                   hits flow; for RESOLVE_BENCH_FEDGATED_B too where it is given
#   RESOLVE_BENCH_INSNS_LISTING=DIR with RESOLVE_BENCH_INSNS: also every instruction executed, with its
#                                   count a packet, to DIR/resolve-insns-LABEL.lst
#   RESOLVE_BENCH_INSNS_FUNCTION=handle_burst  with RESOLVE_BENCH_INSNS: handle_burst (a burst's
#                                   work), or poll_once (a whole poll, the PMDs' receive and send
#                                   included; per request taken in)
#   RESOLVE_BENCH_HUGE=1            part 1: testpmd and fedgated on 2 MB hugepages, which the script
#                                   reserves and gives back (tests/bench/huge.sh); 0, or a machine
#                                   that cannot reserve them: --no-huge (the lines say which)
#   RESOLVE_BENCH_BIG=1             part 3: also the 1M-record step (0: only 100K)
#   RESOLVE_BENCH_PARTS="1 2 3 4"   which parts to run (3 and 4 need 2's lab; they bring one up if 2 is skipped)
#   RESOLVE_BENCH_GROUP_REGS=2000   part 4: registrations in each burst (alone, then as a member)
#   RESOLVE_BENCH_WINDOW=64         register-many: registrations in flight
#   RESOLVE_BENCH_ETCD_MEMBERS=3    part 4: the store's members, 3 or 1 (all on this machine)
#   RESOLVE_BENCH_ETCD_DATA=memory  part 4: the store members' data directories on /dev/shm
#                                   (memory), or under $TMPDIR on this machine's disk (disk): three
#                                   members fsyncing on one virtual disk measure the disk, which a
#                                   deployment gives each member of its own
#   RESOLVE_BENCH_TXN_OPS=128       part 4: the member's [cluster] txn_ops (most segment deletions
#                                   in one transaction) and, above 128, the store's --max-txn-ops
#                                   (128: etcd's default, left as it is)
#   RESOLVE_BENCH_REG_LIMIT_S=150   part 3: stop registering after this long (the rest is measured
#                                   with what got registered; the script says so)
#   RESOLVE_BENCH_ANNOUNCE_LIMIT_S=150  part 3: longest wait for A to hold B's records
set -euo pipefail
BUILD=$(realpath "${1:?usage: resolve_bench.sh BUILD_DIR [SECONDS] | --smoke | --smoke-paired}")
# Part 2's lookups per kind and registrations per node, its pings; part 3's first step.
LAT_N=1000 REG_N=2000 PING_N=200 GWPING_N=100 STEP_N=100000
SMOKE=0
if [[ ${2:-} == --smoke-paired ]]; then set -- "$1" --smoke paired; fi
if [[ ${2:-} == --smoke-insns ]]; then set -- "$1" --smoke insns; fi
if [[ ${2:-} == --smoke ]]; then
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "EAL, network namespaces"
    # Part 1: testpmd's rate needs four stats blocks, which come slower than one a second on a busy
    # machine; fedgated's, two seconds of warm-up and more. 6000 records: more registrations at once
    # than the default punt ring (4096) holds, so every one reaches the directory only through the
    # [dataplane] punt_ring the script sets (part 1 fails when the directory holds fewer).
    SMOKE=1 HUGE=0 SECS=8 RECORDS=6000 REQUESTS=64 ROUNDS=1 FEDGATED=$BUILD/controlplane/fedgated BIG=0 PARTS="1 2 3 4" WINDOW=64 BIG_LIMIT_S=60 ANNOUNCE_LIMIT_S=60 GROUP_N=50
    PAIRED=0 SLICE=1
    # --smoke-paired: part 1 alone, in paired turns (2 rounds of 1 s slices), the build's fedgated
    # as RESOLVE_BENCH_FEDGATED_B too, so that the comparison of builds is run.
    FEDGATED_B=""
    if [[ ${3:-} == paired ]]; then PARTS="1" PAIRED=2 FEDGATED_B=$BUILD/controlplane/fedgated; fi
    # --smoke-insns: part 1's instruction count, one burst of 32 requests stepped.
    INSNS=0 LISTING="" INSNS_FUNCTION=handle_burst
    if [[ ${3:-} == insns ]]; then PARTS="1" INSNS=1 RECORDS=1024; fi
    LAT_N=20 REG_N=20 PING_N=10 GWPING_N=10 STEP_N=1000
else
    SECS=${2:-10}
    RECORDS=${RESOLVE_BENCH_RECORDS:-1024}
    ROUNDS=${RESOLVE_BENCH_ROUNDS:-1}
    HUGE=${RESOLVE_BENCH_HUGE:-1}
    FEDGATED=${RESOLVE_BENCH_FEDGATED:-$BUILD/controlplane/fedgated}
    REQUESTS=${RESOLVE_BENCH_REQUESTS:-4096}
    BIG=${RESOLVE_BENCH_BIG:-1}
    PARTS=${RESOLVE_BENCH_PARTS:-1 2 3 4}
    WINDOW=${RESOLVE_BENCH_WINDOW:-64}
    BIG_LIMIT_S=${RESOLVE_BENCH_REG_LIMIT_S:-150}
    ANNOUNCE_LIMIT_S=${RESOLVE_BENCH_ANNOUNCE_LIMIT_S:-150}
    GROUP_N=${RESOLVE_BENCH_GROUP_REGS:-2000}
    PAIRED=${RESOLVE_BENCH_PAIRED:-0}
    SLICE=${RESOLVE_BENCH_SLICE:-2}
    FEDGATED_B=${RESOLVE_BENCH_FEDGATED_B:-}
    INSNS=${RESOLVE_BENCH_INSNS:-0}
    LISTING=${RESOLVE_BENCH_INSNS_LISTING:-}
    INSNS_FUNCTION=${RESOLVE_BENCH_INSNS_FUNCTION:-handle_burst}
fi
ETCD_MEMBERS=${RESOLVE_BENCH_ETCD_MEMBERS:-3}
TXN_OPS=${RESOLVE_BENCH_TXN_OPS:-128}
[[ $ETCD_MEMBERS == 1 || $ETCD_MEMBERS == 3 ]] ||
    { echo "resolve_bench: RESOLVE_BENCH_ETCD_MEMBERS must be 1 or 3, got '$ETCD_MEMBERS'" >&2; exit 2; }
ETCD_DATA=${RESOLVE_BENCH_ETCD_DATA:-memory}
[[ $ETCD_DATA == memory || $ETCD_DATA == disk ]] ||
    { echo "resolve_bench: RESOLVE_BENCH_ETCD_DATA must be memory or disk, got '$ETCD_DATA'" >&2; exit 2; }
ETCD_TMP=${TMPDIR:-/tmp}
if [[ $ETCD_DATA == memory ]]; then
    if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
        ETCD_TMP=/dev/shm
    else
        echo "resolve_bench: /dev/shm is no tmpfs here: the store's data goes to $ETCD_TMP (disk)" >&2
        ETCD_DATA=disk
    fi
fi
STORE_TEXT=$([[ $ETCD_MEMBERS == 1 ]] && echo "a one-member etcd" || echo "a three-member etcd")
STORE_TEXT+=" (data in $([[ $ETCD_DATA == memory ]] && echo "memory, /dev/shm" || echo "$ETCD_TMP, on disk"))"
uint_in() { # uint_in WHAT VALUE MIN MAX — exits 2 unless VALUE is an integer in MIN..MAX
    if ! [[ $2 =~ ^[0-9]{1,9}$ ]] || (($2 < $3 || $2 > $4)); then
        echo "resolve_bench: $1 must be $3..$4, got '$2'" >&2
        exit 2
    fi
}
uint_in SECONDS "$SECS" 3 3600
uint_in RESOLVE_BENCH_RECORDS "$RECORDS" 1 1000000
uint_in RESOLVE_BENCH_TXN_OPS "$TXN_OPS" 1 10000
uint_in RESOLVE_BENCH_ROUNDS "$ROUNDS" 1 20
uint_in RESOLVE_BENCH_PAIRED "$PAIRED" 0 100
[[ $SLICE =~ ^[0-9]+(\.[0-9]+)?$ ]] && python3 -c "import sys; sys.exit(not 0.5 <= float(sys.argv[1]) <= 30)" "$SLICE" ||
    { echo "resolve_bench: RESOLVE_BENCH_SLICE must be 0.5..30 seconds, got '$SLICE'" >&2; exit 2; }
((PAIRED == 0)) || ROUNDS=1  # the paired turns are their own rounds
uint_in RESOLVE_BENCH_INSNS "$INSNS" 0 20
# shellcheck source=tests/bench/insn_trace.sh
source "$(dirname "$0")/insn_trace.sh"
insn_trace_knobs RESOLVE_BENCH "$INSNS" "$LISTING" "$INSNS_FUNCTION"
LISTING=$INSN_LISTING
((INSNS == 0 || PAIRED == 0)) ||
    { echo "resolve_bench: RESOLVE_BENCH_INSNS and RESOLVE_BENCH_PAIRED are two different runs: set one" >&2; exit 2; }
if ((INSNS)); then
    PARTS="1" ROUNDS=1 HUGE=0  # stepped, not timed: --no-huge does as well
    command -v gdb >/dev/null || { echo "resolve_bench: RESOLVE_BENCH_INSNS needs gdb (tools/deps.sh installs it)" >&2; exit 1; }
fi
[[ -x $FEDGATED && -f $FEDGATED ]] ||
    { echo "resolve_bench: RESOLVE_BENCH_FEDGATED '$FEDGATED' is not an executable file" >&2; exit 2; }
if [[ -n $FEDGATED_B ]]; then
    ((PAIRED > 0 || INSNS > 0)) ||
        { echo "resolve_bench: RESOLVE_BENCH_FEDGATED_B needs RESOLVE_BENCH_PAIRED (the two builds take turns) or RESOLVE_BENCH_INSNS" >&2; exit 2; }
    [[ -x $FEDGATED_B && -f $FEDGATED_B ]] ||
        { echo "resolve_bench: RESOLVE_BENCH_FEDGATED_B '$FEDGATED_B' is not an executable file" >&2; exit 2; }
fi
uint_in RESOLVE_BENCH_REQUESTS "$REQUESTS" 1 1000000
uint_in RESOLVE_BENCH_BIG "$BIG" 0 1
uint_in RESOLVE_BENCH_WINDOW "$WINDOW" 1 65536
uint_in RESOLVE_BENCH_REG_LIMIT_S "$BIG_LIMIT_S" 1 86400
uint_in RESOLVE_BENCH_ANNOUNCE_LIMIT_S "$ANNOUNCE_LIMIT_S" 1 86400
uint_in RESOLVE_BENCH_GROUP_REGS "$GROUP_N" 1 1000000
[[ $(id -u) -eq 0 ]] || { echo "resolve_bench: run as root (EAL, network namespaces)" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "resolve_bench: dpdk-testpmd not found (apt-get install dpdk-dev)" >&2; exit 1; }
for b in tests/fedgate_bench_pcap tests/fedgate_bench_resolve controlplane/fedgated tools/fedgatectl; do
    [[ -x $BUILD/$b ]] || { echo "resolve_bench: $BUILD/$b missing: build first" >&2; exit 1; }
done
part() { [[ " $PARTS " == *" $1 "* ]]; }
# The system interpreter: a version manager's shim can take a second to start on a busy machine.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)

WORK=$(mktemp -d /tmp/fedgate-resolvebench.XXXXXX)
TP_PREFIX=fgres-tp-$$
FG_PREFIX=fgres-fg-$$
BENCH=$BUILD/tests/fedgate_bench_resolve
# The lab: a prefix of our own ([a-z0-9]{1,4}), never one an integration test uses (r<digits>).
# shellcheck disable=SC2034  # LAB_* are read by tools/lab.sh
LAB_BUILD=$BUILD
LAB_PREFIX=${RESOLVE_BENCH_LAB_PREFIX:-rb$((RANDOM % 100))}
LAB_PARTIES=3
LAB_TIMEOUT_S=120
# shellcheck source=tools/lab.sh
source "$(dirname "$0")/../../tools/lab.sh"
# Part 4's store: etcd_up, etcd_attach, etcd_down (idempotent, so cleanup calls it whatever ran).
# shellcheck source=tests/integration/lib_etcd.sh
source "$(dirname "$0")/../integration/lib_etcd.sh"
LAB_IS_UP=0
# shellcheck source=tests/bench/huge.sh
source "$(dirname "$0")/huge.sh"
# shellcheck source=tests/bench/testpmd_rate.sh
source "$(dirname "$0")/testpmd_rate.sh"
bench_huge_init
PIDS=()
stop_all() {
    local p
    # A daemon stopped for the paired turns takes its SIGINT once it is continued.
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -INT "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    # The gateways first: a member stopping may still talk to the store.
    if ((LAB_IS_UP)); then lab_down || true; fi
    etcd_down
    bench_huge_release
    rm -rf "$WORK" "/var/run/dpdk/$TP_PREFIX" "/var/run/dpdk/$FG_PREFIX" "/var/run/dpdk/$FG_PREFIX-b" "/var/run/dpdk/$TP_PREFIX-io" \
        "/var/run/dpdk/$TP_PREFIX-5tswap"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SUMMARY=()
SMOKE_FAILS=()  # smoke mode: figures that came out empty (never a judgement of speed)
smoke_fail() { SMOKE_FAILS+=("$*"); }
say() { echo "$*"; }
result() { echo "  $*"; SUMMARY+=("$*"); }  # a result line: printed now and again in the summary

# ================================================================================================
# Part 1: cache hits on the data plane beside testpmd
# ================================================================================================
# As nat_bench.sh: net_pcap's infinite_rx keeps every packet of the file in an mbuf for the whole run;
# and fedgated's registrations, read at once, wait in its punt ring (each in an mbuf) for the
# control thread: part1_mbufs is the requests, the records and room for both to move.
mbuf_count() { echo $(($1 + 32768)); }
part1_mbufs() { mbuf_count $((REQUESTS + RECORDS)); }
# fedgated's [dataplane] punt_ring line for RECORDS registrations read at once: a power of two above
# them; none while the default ring (4096) is enough, so that another build's binary without the key
# runs the default sizes.
punt_ring_line() {
    local n=4096
    ((RECORDS < n)) && return
    while ((n <= RECORDS)); do n=$((n * 2)); done
    echo "punt_ring = $n"
}
# The daemon ctl1 and sample1 talk to: part 1's (fedgated_b's only while it comes up).
FG_SOCK=""
ctl1() { taskset -c 0 "$BUILD/tools/fedgatectl" --socket "${FG_SOCK:-$WORK/fedgated.sock}" "$@"; }
# One stats sample: "t hits requesters_tx requests drops local registrations_rx".
sample1() {
    ctl1 stats --json | taskset -c 0 "$PY" -c '
import json, sys, time
r = json.load(sys.stdin); res = r["resolution"]
port = {p["name"]: p for p in r["ports"]}
print(time.monotonic(), res["resolve"]["hits"], port["requesters"]["tx_packets"], res["resolve"]["requests"],
      sum(p["drops"] for p in r["ports"]), res["directory"]["local"], port["registrations"]["rx_packets"])'
}

run_part1() {
    local round
    local which="" && [[ $FEDGATED != "$BUILD/controlplane/fedgated" ]] && which=" (fedgated: $FEDGATED)"
    [[ -z $FEDGATED_B ]] || which+=" (fedgated_b: $FEDGATED_B)"
    # testpmd and fedgated take turns, so one reservation serves both (paired: the two testpmds and
    # fedgated hold their memory at once, so three, four with fedgated_b); given back before the lab.
    if ((HUGE)); then bench_huge_reserve "$WORK/huge" "$(($(eal_mb "$(part1_mbufs)" 2176 huge) * (PAIRED ? 3 + (${#FEDGATED_B} > 0) : 1)))" resolve_bench; fi
    if ((INSNS)); then
        say "== part 1: a cache hit's instructions in Dataplane::$INSNS_FUNCTION ($RECORDS records, $REQUESTS requests from 16 requesters, $INSNS call(s) of it stepped under gdb)$which"
    elif ((PAIRED)); then
        say "== part 1: cache hits on the data plane beside dpdk-testpmd ($RECORDS records, $REQUESTS requests from 16 requesters, paired turns: $PAIRED rounds of ${SLICE}s slices)$which"
    else
        say "== part 1: cache hits on the data plane beside dpdk-testpmd ($RECORDS records, $REQUESTS requests from 16 requesters, ${SECS}s each, $ROUNDS round(s))$which"
    fi
    result "part 1: memory: $MEMORY"
    "$BUILD/tests/fedgate_bench_pcap" --resolve "$WORK/register.pcap" "$WORK/resolve.pcap" 198.18.1.1 1 "$RECORDS" "$REQUESTS" 198.18.9
    : >"$WORK/part1-rounds.txt"
    if ((INSNS)); then
        part1_insns
        return
    fi
    for ((round = 1; round <= ROUNDS; round++)); do
        ((ROUNDS == 1)) || say "  -- round $round of $ROUNDS"
        part1_round
    done
    bench_huge_release
    ((ROUNDS > 1)) || return 0
    # The middle of the rounds: each round's pair ran minutes apart at most, the rounds over longer.
    "$PY" - "$WORK/part1-rounds.txt" >"$WORK/part1-medians.txt" <<'PY'
import sys
from statistics import median
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
ratios = sorted(fg / tp for fg, tp, _ in rows if tp)
ratios_io = sorted(fg / io for fg, _, io in rows if io)
print(f"part 1: median of {len(rows)} rounds: fedgated {median(fg for fg, _, _ in rows) / 1e6:.2f} M replies/s, "
      f"testpmd 5tswap {median(tp for _, tp, _ in rows) / 1e6:.2f} M pkts/s, ratio {median(ratios):.2f} "
      f"(from {ratios[0]:.2f} to {ratios[-1]:.2f})" if ratios else "part 1: no round measured testpmd 5tswap")
print(f"part 1: median of {len(rows)} rounds: testpmd io {median(io for _, _, io in rows) / 1e6:.2f} M pkts/s, "
      f"ratio {median(ratios_io):.2f} (from {ratios_io[0]:.2f} to {ratios_io[-1]:.2f})" if ratios_io
      else "part 1: no round measured testpmd io")
PY
    while IFS= read -r line; do result "$line"; done <"$WORK/part1-medians.txt"
}

# part1_testpmd MODE RX_VDEV NULL_VDEV MBUFS: testpmd forwarding in MODE (io: untouched; 5tswap:
# MACs, addresses and ports swapped) from the requests' net_pcap0 to net_null0 on lcore 1 for SECS;
# sets TP_RATE to its packets per second on port 1 (0 when it measured nothing).
part1_testpmd() {
    local mode=$1 rx_vdev=$2 null_vdev=$3 mbufs=$4 tp_mb per_block log=$WORK/testpmd-$1.log
    tp_mb=$(eal_mb "$mbufs" 2176)
    # shellcheck disable=SC2046 # eal_mem_args is several words on purpose
    stdbuf -oL dpdk-testpmd -l 0,1 $(eal_mem_args "$tp_mb") --no-shconf --no-pci --log-level lib.eal:error \
        --file-prefix "$TP_PREFIX" --vdev "$rx_vdev" --vdev "$null_vdev" -- \
        --forward-mode="$mode" --nb-cores=1 --auto-start --stats-period 1 --total-num-mbufs="$mbufs" \
        --mbuf-size=2176 --no-mlockall > >(testpmd_stamp >"$log") 2>&1 &
    PIDS+=($!)
    testpmd_run_window "$log" 1 "${PIDS[0]}" "$SECS" 600
    stop_all
    # Over the stamps' times (tests/bench/testpmd_rate.sh); beside it, the growth per stats block,
    # which the script took as a second's before 2026-12-05.
    TP_RATE=$(testpmd_tx_rate "$log" 1)
    per_block=$(testpmd_tx_per_block "$log" 1)
    echo "  testpmd $mode: $TP_RATE pkts/s over the stamps' times, $per_block per stats block"
    if [[ $TP_RATE == 0 ]]; then
        echo "resolve_bench: testpmd $mode measured nothing; its log:" >&2
        tail -20 "$log" >&2
    fi
    rm -rf "/var/run/dpdk/$TP_PREFIX"
}

# part1_paired RX_VDEV NULL_VDEV MBUFS FG_PID [FG_B_PID]: the paired turns (tests/bench/paired.py) of
# fedgated (up, its directory filled; and fedgated_b's, where given) with testpmd io and 5tswap started
# in interactive mode on the same vdevs; fedgated's replies are the TX packets of its port 1
# (requesters), testpmd's of its port 1 (net_null0).
part1_paired() {
    local rx_vdev=$1 null_vdev=$2 mbufs=$3 fg_pid=$4 fg_b_pid=${5:-} tp_mb mode out=$WORK/part1-paired.txt
    local -A argv
    local b_args=()
    [[ -z $fg_b_pid ]] || b_args=(--fedgated fedgated_b "$fg_b_pid" "$WORK/fedgated-b.sock" --also-against fedgated)
    tp_mb=$(eal_mb "$mbufs" 2176)
    for mode in io 5tswap; do
        argv[$mode]=$(testpmd_interactive_argv "$mode" "$tp_mb" "$TP_PREFIX-$mode" "$rx_vdev" "$null_vdev" "$mbufs" 2176)
    done
    sleep 2  # warm
    kill -STOP "$fg_pid" ${fg_b_pid:+"$fg_b_pid"}
    if ! taskset -c 0 "$PY" "$(dirname "$0")/paired.py" --rounds "$PAIRED" --seconds "$SLICE" --warmup 2 --port 1 \
        --reference 5tswap --testpmd io "${argv[io]}" --testpmd 5tswap "${argv[5tswap]}" \
        --fedgated fedgated "$fg_pid" "$WORK/fedgated.sock" "${b_args[@]}" >"$out"; then
        stop_all
        result "part 1: FAILED (the paired turns)"
        smoke_fail "part 1: the paired turns failed"
        return
    fi
    sed 's/^/  /' "$out"
    ctl1 stats --json >"$WORK/stats1.json"
    stop_all
    rm -rf "/var/run/dpdk/$FG_PREFIX" "/var/run/dpdk/$FG_PREFIX-b" "/var/run/dpdk/$TP_PREFIX-io" "/var/run/dpdk/$TP_PREFIX-5tswap"
    "$PY" - "$out" "$WORK/stats1.json" "$PAIRED" "$SLICE" >"$WORK/part1.txt" <<'PY'
import json, sys
rate, ratio = {}, {}
for line in open(sys.argv[1]):
    w = line.split()
    if w[0] == "rate": rate[w[1]] = (int(w[2]), int(w[3]), int(w[4]))
    elif w[0] == "ratio" and w[3] != "-":
        ci = f" [95%: {float(w[6]):.2f}-{float(w[7]):.2f}]" if len(w) >= 8 and w[6] != "-" else ""
        ratio[w[1], w[2]] = tuple(float(x) for x in w[3:6]) + (ci,)
with_b = "fedgated_b" in rate  # paired.py gives a rate line for every forwarder in the turns
r = json.load(open(sys.argv[2]))
reasons = {k: v for k, v in r["drops_by_reason"].items() if v}
fg, sw, io = (rate.get(k, (0, 0, 0)) for k in ("fedgated", "5tswap", "io"))
print(f"RESULT part 1: paired turns, {sys.argv[3]} rounds of {sys.argv[4]} s slices (medians, lowest-highest,"
      " [an interval holding the median ratio with at least 95% probability, from 6 rounds])")
print(f"RESULT part 1: fedgated replies/s {fg[0] / 1e6:.2f} M ({fg[1] / 1e6:.2f}-{fg[2] / 1e6:.2f}); testpmd 5tswap pkts/s "
      f"{sw[0] / 1e6:.2f} M ({sw[1] / 1e6:.2f}-{sw[2] / 1e6:.2f}); io {io[0] / 1e6:.2f} M")
f = ratio.get(("fedgated", "5tswap"))
print(f"RESULT part 1: ratio fedgated replies/testpmd 5tswap {f[0]:.2f} ({f[1]:.2f}-{f[2]:.2f}){f[3]}, paired" if f
      else "RESULT part 1: ratio: nothing measured")
fb = rate.get("fedgated_b", (0, 0, 0))
if with_b:
    print(f"RESULT part 1: fedgated_b replies/s {fb[0] / 1e6:.2f} M ({fb[1] / 1e6:.2f}-{fb[2] / 1e6:.2f})")
    for against, what in (("5tswap", "testpmd 5tswap"), ("fedgated", "fedgated")):
        b = ratio.get(("fedgated_b", against))
        print(f"RESULT part 1: ratio fedgated_b replies/{what} {b[0]:.2f} ({b[1]:.2f}-{b[2]:.2f}){b[3]}, paired" if b
              else f"RESULT part 1: ratio fedgated_b/{what}: nothing measured")
print(f"RESULT part 1: ratio fedgated replies/testpmd io {fg[0] / io[0]:.2f} (of the medians)" if io[0] else
      "RESULT part 1: ratio: testpmd io measured nothing")
print(f"RESULT part 1: drops by reason (whole run): {reasons or 'none'}")
print("OK" if fg[1] > 0 and sw[1] > 0 and io[1] > 0 and (fb[1] > 0 or not with_b) else "EMPTY")
PY
    while IFS= read -r line; do
        if [[ $line == "RESULT "* ]]; then result "${line#RESULT }"
        elif [[ $line == EMPTY ]]; then smoke_fail "part 1: a forwarder of the paired turns sent nothing"
        fi
    done <"$WORK/part1.txt"
}

# part1_fedgated BIN SUFFIX RX_VDEV NULL_VDEV MBUFS: fedgated BIN up on the vdevs (its socket, state,
# config, log and EAL prefix named with SUFFIX: "" for part 1's daemon, "-b" for fedgated_b), its PID
# the last of PIDS, its directory filled from the registrations file; sets DIR_LOCAL (records held)
# and FILLED_S (seconds the filling took). Returns 1 (everything stopped) when it does not come up.
part1_fedgated() {
    # On the same vdevs: feed (the same net_pcap0), requesters (the same net_null0), registrations
    # (read once), external; data plane on lcore 1, never sleeping.
    local bin=$1 sfx=$2 rx_vdev=$3 null_vdev=$4 mbufs=$5 fg_mb cap neigh i up
    fg_mb=$(eal_mb "$mbufs" 2176)
    cap=$((RECORDS * 2 > 1024 ? RECORDS * 2 : 1024))
    neigh=""
    for i in $(seq 2 17); do
        neigh+="${neigh:+, }\"198.18.9.$i 02:00:00:09:00:$(printf %02x "$i")\""
    done
    rm -rf "$WORK/state$sfx"
    cat >"$WORK/bench$sfx.toml" <<TOML
[gateway]
party = "bench"
party_id = 1
socket = "$WORK/fedgated$sfx.sock"
state_dir = "$WORK/state$sfx"
[eal]
args = ["-l", "0,1", $(eal_mem_args "$fg_mb" | sed 's/[^ ]*/"&",/g') "--no-shconf", "--no-pci", "--file-prefix", "$FG_PREFIX$sfx", "--log-level", "lib.eal:error"]
[dataplane]
idle = "spin"
mbufs = $mbufs
$(punt_ring_line)
[resolve]
cache_capacity = $cap
heartbeat_ms = 3600000
heartbeat_timeout_ms = 86400000
[[port]]
name = "feed"
role = "internal"
device = "$rx_vdev"
address = "198.18.1.1/24"
[[port]]
name = "requesters"
role = "internal"
device = "$null_vdev"
address = "198.18.9.1/24"
static_neighbours = [$neigh]
[[port]]
name = "registrations"
role = "internal"
device = "net_pcap1,rx_pcap=$WORK/register.pcap"
address = "198.18.3.1/24"
[[port]]
name = "external"
role = "external"
device = "net_null1,no-rx=1"
address = "198.19.0.1/24"
TOML
    "$bin" --config "$WORK/bench$sfx.toml" >"$WORK/fedgated$sfx.log" 2>&1 &
    PIDS+=($!)
    FG_SOCK=$WORK/fedgated$sfx.sock
    up=0
    for _ in $(seq 600); do
        ctl1 status >/dev/null 2>&1 && { up=1; break; }
        kill -0 "${PIDS[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    if ((up == 0)); then
        echo "resolve_bench: fedgated$sfx did not come up; its log:" >&2
        tail -20 "$WORK/fedgated$sfx.log" >&2
        FG_SOCK=""
        stop_all
        result "part 1: FAILED (fedgated$sfx did not start)"
        smoke_fail "part 1: fedgated$sfx did not start"
        return 1
    fi
    # Until the directory holds every record, or the registrations file is read and nothing changes.
    local t_fill0 dir_local=0 reg_rx=0 last=-1 still=0
    t_fill0=$(date +%s.%N)
    for _ in $(seq 600); do
        read -r _ _ _ _ _ dir_local reg_rx < <(sample1) || true
        ((dir_local == RECORDS)) && break
        if ((reg_rx >= RECORDS && dir_local == last)); then
            still=$((still + 1))
            ((still < 20)) || break
        else
            still=0
        fi
        last=$dir_local
        sleep 0.1
    done
    FILLED_S=$("$PY" -c "import time; print(f'{time.time() - $t_fill0:.1f}')")
    DIR_LOCAL=$dir_local
    FG_SOCK=""
    if ((dir_local != RECORDS)); then
        say "  WARNING: fedgated$sfx's directory holds $dir_local of $RECORDS records (registrations port read $reg_rx packets)"
        smoke_fail "part 1: fedgated$sfx's directory holds $dir_local of $RECORDS records"
    fi
}

# part1_insns: each daemon alone on the requests (as part1_round's, without testpmd), its directory
# full and its cache answering, then stepped through INSNS bursts; a result line per daemon and,
# with fedgated_b, their ratio.
part1_insns() {
    local res=$WORK/resolve.pcap mbufs label bin out h0 h1 i per per_a=""
    local rx_vdev="net_pcap0,rx_pcap=$res,infinite_rx=1" null_vdev="net_null0,no-rx=1"
    mbufs=$(part1_mbufs)
    for label in fedgated ${FEDGATED_B:+fedgated_b}; do
        bin=$FEDGATED
        [[ $label == fedgated_b ]] && bin=$FEDGATED_B
        part1_fedgated "$bin" "" "$rx_vdev" "$null_vdev" "$mbufs" || return 0
        # Hits flowing: the counter moved between two samples (the bursts traced are cache hits).
        FG_SOCK=$WORK/fedgated.sock
        read -r _ h0 _ < <(sample1)
        for i in $(seq 300); do
            read -r _ h1 _ < <(sample1)
            ((h1 > h0)) && break
            sleep 0.1
        done
        FG_SOCK=""
        if ((h1 <= h0)); then
            stop_all
            result "part 1: FAILED ($label answered no request from the cache)"
            smoke_fail "part 1: $label answered no request from the cache"
            return 0
        fi
        out=$WORK/resolve-insns-$label.txt
        if ! insn_trace "${PIDS[-1]}" "$INSNS" "$out" "${LISTING:+$LISTING/resolve-insns-$label.lst}" "$INSNS_FUNCTION"; then
            stop_all
            result "part 1: FAILED (the instruction trace of $label)"
            smoke_fail "part 1: the instruction trace of $label failed"
            return 0
        fi
        stop_all
        rm -rf "/var/run/dpdk/$FG_PREFIX"
        per=$(insn_trace_field "$out" per_packet)
        result "part 1: $label: $per instructions a request answered from the cache, in $INSNS_FUNCTION ($(insn_trace_field "$out" packets) requests stepped; $bin)"
        insn_trace_functions "$out" "$(insn_trace_functions_shown "$INSNS_FUNCTION")"
        [[ -z $LISTING ]] || say "  every instruction: $LISTING/resolve-insns-$label.lst"
        if [[ -z $per_a ]]; then per_a=$per; else result "part 1: ratio fedgated_b/fedgated instructions $("$PY" -c "import sys; print(f'{float(sys.argv[2]) / float(sys.argv[1]):.3f}')" "$per_a" "$per")"; fi
    done
}

part1_round() {
    local res=$WORK/resolve.pcap mbufs tp_pps tp_io
    local rx_vdev="net_pcap0,rx_pcap=$res,infinite_rx=1" null_vdev="net_null0,no-rx=1"
    mbufs=$(part1_mbufs)

    # --- the references: testpmd io, then 5tswap, port 0 -> port 1, lcore 1 (paired: below) ---
    if ((PAIRED == 0)); then
        part1_testpmd io "$rx_vdev" "$null_vdev" "$mbufs"
        tp_io=$TP_RATE
        part1_testpmd 5tswap "$rx_vdev" "$null_vdev" "$mbufs"
        tp_pps=$TP_RATE
    fi

    # --- fedgated (and fedgated_b) on the same vdevs ---
    part1_fedgated "$FEDGATED" "" "$rx_vdev" "$null_vdev" "$mbufs" || return 0
    local dir_local=$DIR_LOCAL filled_s=$FILLED_S
    if ((PAIRED)); then
        local fg_a=${PIDS[-1]} fg_b=""
        if [[ -n $FEDGATED_B ]]; then
            # fedgated's lcore spins: stopped while fedgated_b comes up and fills its directory alone.
            kill -STOP "$fg_a"
            part1_fedgated "$FEDGATED_B" "-b" "$rx_vdev" "$null_vdev" "$mbufs" || return 0
            fg_b=${PIDS[-1]}
            kill -CONT "$fg_a"
        fi
        part1_paired "$rx_vdev" "$null_vdev" "$mbufs" "$fg_a" "$fg_b"
        return
    fi
    sleep 2  # the same warm-up testpmd's first two periods get
    local t0 h0 x0 q0 d0 t1 h1 x1 q1 d1
    read -r t0 h0 x0 q0 d0 _ _ < <(sample1)
    sleep $((SECS - 2))
    read -r t1 h1 x1 q1 d1 _ _ < <(sample1)
    ctl1 stats --json >"$WORK/stats1.json"
    stop_all
    rm -rf "/var/run/dpdk/$FG_PREFIX"

    "$PY" - "$WORK/stats1.json" "$RECORDS" "$dir_local" "$filled_s" "$tp_pps" "$t0" "$h0" "$x0" "$q0" "$d0" \
        "$t1" "$h1" "$x1" "$q1" "$d1" "$WORK/part1-rounds.txt" "$tp_io" >"$WORK/part1.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
records, local, filled = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tp, tp_io = int(sys.argv[5]), int(sys.argv[17])
t0, h0, x0, q0, d0, t1, h1, x1, q1, d1 = (float(x) for x in sys.argv[6:16])
dt = t1 - t0
hits, replies, reqs, drops = (h1 - h0) / dt, (x1 - x0) / dt, (q1 - q0) / dt, (d1 - d0) / dt
res = r["resolution"]
reasons = {k: v for k, v in r["drops_by_reason"].items() if v}
print(f"RESULT part 1: directory {local}/{records} records (waited {filled} s); "
      f"registrations refused: {sum(v for k, v in res['directory'].items() if k.startswith('refused_'))}")
print(f"RESULT part 1: fedgated cache hits/s {hits / 1e6:.2f} M, replies sent/s {replies / 1e6:.2f} M, "
      f"requests/s {reqs / 1e6:.2f} M, drops/s {drops / 1e6:.2f} M")
print(f"RESULT part 1: dpdk-testpmd 5tswap pkts/s {tp / 1e6:.2f} M, io pkts/s {tp_io / 1e6:.2f} M")
print(f"RESULT part 1: ratio fedgated replies/testpmd 5tswap {replies / tp:.2f}" if tp else "RESULT part 1: ratio: testpmd 5tswap measured nothing")
print(f"RESULT part 1: ratio fedgated replies/testpmd io {replies / tp_io:.2f}" if tp_io else "RESULT part 1: ratio: testpmd io measured nothing")
with open(sys.argv[16], "a") as rounds:
    rounds.write(f"{replies} {tp} {tp_io}\n")
print(f"RESULT part 1: drops by reason (whole run): {reasons or 'none'}")
rv = res["resolve"]
print(f"  resolve counters: requests {rv['requests']} hits {rv['hits']} misses {rv['misses']} not_found {rv['not_found']} "
      f"replies_sent {rv['replies_sent']} refused {rv['refused']} events_lost {rv['events_lost']}")
PY
    while IFS= read -r line; do
        if [[ $line == "RESULT "* ]]; then result "${line#RESULT }"; else echo "$line"; fi
    done <"$WORK/part1.txt"
    if ((SMOKE)); then
        ((tp_pps > 0)) || smoke_fail "part 1: testpmd 5tswap sent nothing"
        ((tp_io > 0)) || smoke_fail "part 1: testpmd io sent nothing"
        ((x1 > x0)) || smoke_fail "part 1: fedgated sent no replies"
    fi
}

# ================================================================================================
# The lab (parts 2, 3 and 4)
# ================================================================================================
jq_py() { "$PY" -c "import json,sys; r=json.load(sys.stdin); print($1)"; }
# A gateway's stats value: gstat a "['resolution']['directory']['local']"
gstat() { lab_ctl "$1" stats --json | jq_py "r$2"; }
remote_total() { lab_ctl "$1" dir list --remote --limit 1 --json | jq_py "r['total']"; }
# node_ns a|b|c: that party's node namespace; gw_in: its gateway's internal address; node_ip: its node's.
node_ns() { case $1 in a) echo "$NS_A_NODE" ;; b) echo "$NS_B_NODE" ;; c) echo "$NS_C_NODE" ;; esac; }
gw_in() { case $1 in a) echo "$A_IN_IP" ;; b) echo "$B_IN_IP" ;; c) echo "$C_IN_IP" ;; esac; }
node_ip() { case $1 in a) echo "$A_NODE_IP" ;; b) echo "$B_NODE_IP" ;; c) echo "$C_NODE_IP" ;; esac; }
# register_many g PARTY NODE COUNT: on g's node, against g's gateway; prints the tool's line.
# Extra arguments go to the tool (--max-seconds, --progress-s).
register_many() {
    local g=$1 party=$2 node=$3 count=$4
    shift 4
    ip netns exec "$(node_ns "$g")" taskset -c 0 "$BENCH" register-many --gateway "$(gw_in "$g")" --party "$party" \
        --node "$node" --count "$count" --listen-ip "$(node_ip "$g")" --window "$WINDOW" "$@"
}
latency() { # latency FIRST_PID COUNT: from A's node
    ip netns exec "$NS_A_NODE" taskset -c 0 "$BENCH" latency --gateway "$A_IN_IP" --targets "$1" --count "$2"
}
wait_until() { # wait_until SECONDS WHAT CMD... — polls CMD every 0.2 s
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS < deadline)) || { echo "resolve_bench: timed out after ${limit}s waiting for $what" >&2; return 1; }
        sleep 0.2
    done
}
remote_at_least() { local n; n=$(remote_total "$1" 2>/dev/null) && ((n >= $2)); }

lab_edit_configs() {
    # Records live for a day, no heartbeats needed; broadcasts are not rate-limited in practice;
    # room for every record of part 3. C does not announce: its processes take directed queries.
    local f
    for f in "$A_CONF" "$B_CONF" "$C_CONF"; do
        cat >>"$f" <<'TOML'

[resolve]
heartbeat_ms = 3600000
heartbeat_timeout_ms = 86400000
broadcast_rate = 100000
broadcast_burst = 10000
requester_broadcast_rate = 100000
requester_broadcast_burst = 10000
cache_capacity = 2000000
TOML
    done
    echo 'announce = false' >>"$C_CONF"
}

bring_lab_up() {
    ((LAB_IS_UP)) && return 0
    say "== lab: three parties, prefix $LAB_PREFIX"
    LAB_IS_UP=1
    lab_up
}

# ================================================================================================
# Part 2: miss latency across namespaces
# ================================================================================================
run_part2() {
    bring_lab_up
    say "== part 2: resolve round trips from A's node ($LAT_N distinct targets per kind, one at a time)"
    local line
    line=$(register_many c 3 1 "$REG_N")
    say "  C's node: $line"
    line=$(register_many b 2 2 "$REG_N")
    say "  B's node: $line"
    wait_until 120 "A to hold B's $REG_N announced records" remote_at_least a "$REG_N"

    local kind first out
    for kind in directed broadcast hit; do
        case $kind in
            directed) first=3.1.0 ;;   # C does not announce: a query to C
            broadcast) first=0.2.0 ;;  # party 0: every peer asked, B has it
            hit) first=2.2.0 ;;        # B announced it: A's cache
        esac
        out=$(latency "$first" "$LAT_N")
        printf '%s\n' "$out" | sed 's/^/    /' | sed "1s/^    /  $kind ($first..): /"
        read -r _ p50 _ p99 _ ok _ notok <<<"$(head -1 <<<"$out")"
        result "$(printf 'part 2: %-24s p50 %6s us  p99 %6s us  (ok %s, not ok %s)' "$kind" "$p50" "$p99" "$ok" "$notok")"
        if ((SMOKE)) && ! [[ $ok =~ ^[0-9]+$ && $ok -gt 0 ]]; then smoke_fail "part 2: no $kind lookup answered"; fi
    done

    # The kernel's ping from A's node to A's internal address, and A's own ping of C's external one.
    ip netns exec "$NS_A_NODE" taskset -c 0 ping -c "$PING_N" -i 0.01 -W 1 "$A_IN_IP" >"$WORK/ping.txt" 2>&1 || true
    lab_ctl a ping "$C_EXT_IP" --count "$GWPING_N" --json >"$WORK/gwping.json" 2>&1 || true
    "$PY" - "$WORK/ping.txt" "$WORK/gwping.json" "$PING_N" "$GWPING_N" >"$WORK/part2.txt" <<'PY'
import json, math, re, sys
def pct(v, p):
    v = sorted(v)
    return v[max(1, math.ceil(p * len(v))) - 1] if v else float("nan")
node = [float(x) * 1000 for x in re.findall(r"time=([0-9.]+) ms", open(sys.argv[1]).read())]
try:
    r = json.load(open(sys.argv[2]))
    r = r.get("result", r)
    gw = [x * 1000 for x in r["rtt_ms"] if isinstance(x, (int, float))]
except (ValueError, KeyError):
    gw = []
for name, v, sent in (("node -> gateway A ping", node, int(sys.argv[3])), ("gateway A -> C fedgatectl ping", gw, int(sys.argv[4]))):
    print(f"RESULT part 2: {name:<31}p50 {pct(v, .5):6.0f} us  p99 {pct(v, .99):6.0f} us  ({len(v)}/{sent} replies)")
PY
    while IFS= read -r line; do result "${line#RESULT }"; done <"$WORK/part2.txt"
    say "  A: $(lab_ctl a stats --json | jq_py "'resolve', {k: v for k, v in r['resolution']['resolve'].items() if v}")"
}

# ================================================================================================
# Part 3: announce time and memory per record
# ================================================================================================
# Watches gateway A from its start: its pid (status), VmRSS and the records it holds
# (resolution.cache.announced, in `stats`) at once, then polls the count every 20 ms over the
# management socket until A holds TARGET records or TIMEOUT_S passes, then VmRSS again. Not `dir
# list` for the polling: that walks the whole cache under the lock the control thread applying the
# announcements needs, so polling it would slow what it measures (its total is checked once at the
# end). Prints "pid rss0_kb have0 t_first t_all count rss1_kb samples", times in seconds after T_LAUNCH.
watch_announce() { # watch_announce TARGET T_LAUNCH TIMEOUT_S
    taskset -c 0 "$PY" - "$A_SOCK" "$1" "$2" "$3" <<'PY'
import json, socket, sys, time
path, target, t_launch, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
def call(cmd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(1 << 16)
        if not chunk: break
        buf += chunk
    s.close()
    r = json.loads(buf)
    return r.get("result", r)
def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1])
announced = lambda: call("stats")["resolution"]["cache"]["announced"]
pid = call("status")["pid"]
rss0, have0 = rss_kb(pid), announced()
first = time.time() if have0 > 0 else None
n, samples, deadline = have0, 0, time.time() + timeout
while n < target:
    time.sleep(0.02)
    n, t = announced(), time.time(); samples += 1
    if n > 0 and first is None: first = t
    if t > deadline: break
t = time.time()
print(pid, rss0, have0, f"{(first or t) - t_launch:.3f}", f"{t - t_launch:.3f}", n, rss_kb(pid), samples)
PY
}

announce_step() { # announce_step NODE COUNT LABEL [REGISTER-MANY ARGS] — B's node registers COUNT as 2.NODE.*; A restarted, timed
    local node=$1 count=$2 label=$3 line expected t_launch t_up pid rss0 have0 first all n rss1 total
    shift 3
    lab_stop a
    say "  [$label] A stopped (exit $LAB_RC); B's node registers $count records 2.$node.0.."
    if ! line=$(register_many b 2 "$node" "$count" "$@" 2>"$WORK/progress.txt"); then
        cat "$WORK/progress.txt" >&2
        result "part 3 [$label]: registration FAILED: $line"
        smoke_fail "part 3 [$label]: registration failed"
        lab_start a
        return
    fi
    cat "$WORK/progress.txt"
    say "  [$label] B's node: $line"
    # The rate in the first and the last progress period: how registration keeps up as B's directory grows.
    local rates
    rates=$(awk '/register-many:/ {gsub(/\(/, "", $6); r[n++] = $6} END {if (n > 1) print r[0] " -> " r[n-1]}' "$WORK/progress.txt")
    [[ -z $rates ]] || result "part 3 [$label]: registrations per second, first 10 s -> last 10 s: $rates"
    local reg_n reg_s reg_rate
    read -r _ reg_n _ _ reg_s _ reg_rate _ <<<"$line"
    reg_rate=${reg_rate#(}
    reg_rate=${reg_rate%%/*}
    if [[ $line == *"time limit"* ]]; then
        result "part 3 [$label]: NOTE only $reg_n of $count registered within RESOLVE_BENCH_REG_LIMIT_S=${BIG_LIMIT_S}s:" \
            "B's registration rate falls as its directory grows; the rest of this step measures what was registered"
        reg_n="$reg_n of $count (time limit)"
    fi
    expected=$(gstat b "['resolution']['directory']['local']")
    t_launch=$(date +%s.%N)
    lab_start a
    t_up=$(date +%s.%N)
    read -r pid rss0 have0 first all n rss1 _ < <(watch_announce "$expected" "$t_launch" "$ANNOUNCE_LIMIT_S")
    local t_list0 t_list1
    t_list0=$(date +%s.%N)
    total=$(remote_total a)
    t_list1=$(date +%s.%N)
    "$PY" - "$label" "$reg_n" "$reg_s" "$reg_rate" "$expected" "$t_launch" "$t_up" "$first" "$all" "$n" \
        "$rss0" "$rss1" "$have0" "$total" "$t_list0" "$t_list1" "$pid" >"$WORK/part3.txt" <<'PY'
import sys
(label, reg_n, reg_s, reg_rate, expected, t_launch, t_up, first, done, n, rss0, rss1, have0, total,
 tl0, tl1, pid) = sys.argv[1:]
expected, n, have0, total = int(expected), int(n), int(have0), int(total)
up = float(t_up) - float(t_launch)
first, done = float(first), float(done)
rss0, rss1 = int(rss0) * 1024, int(rss1) * 1024
short = "" if n >= expected else f"  <- only {n} of {expected} arrived in time"
early = f" ({have0} already there at the first look)" if have0 else ""
print(f"RESULT part 3 [{label}]: registered {reg_n} on B in {float(reg_s):.1f} s ({reg_rate}/s on average)")
print(f"RESULT part 3 [{label}]: A answered {up:.2f} s after launch; first record {first - up:+.2f} s from then{early}; "
      f"{n} of B's {expected} records {done - up:.2f} s after it answered "
      f"({(n - have0) / max(done - max(first, up), 1e-3) / 1e3:.0f}K records/s){short}")
print(f"RESULT part 3 [{label}]: A's dir list --remote total {total} (the call took {float(tl1) - float(tl0):.2f} s)")
print(f"RESULT part 3 [{label}]: A's VmRSS (pid {pid}) {rss0 / 2**20:.1f} MiB with {have0} records -> {rss1 / 2**20:.1f} MiB "
      f"with {n}: {(rss1 - rss0) / max(n - have0, 1):.0f} bytes per record")
PY
    while IFS= read -r line; do result "${line#RESULT }"; done <"$WORK/part3.txt"
    if ((SMOKE)) && ! ((expected > 0 && n >= expected)); then
        smoke_fail "part 3 [$label]: A holds $n of B's $expected records"
    fi
    say "  [$label] B's announce stream to A: $(lab_ctl b stats --json | jq_py "[p for p in r['resolution']['exchange']['peers'] if p['party'] == 'alpha'][0]")"
    say "  [$label] A: $(lab_ctl a stats --json | jq_py "r['resolution']['cache'], {k: v for k, v in r['resolution']['exchange'].items() if k != 'peers'}")"
}

run_part3() {
    bring_lab_up
    say "== part 3: announce time and memory per record (C stopped, so only A takes B's stream)"
    lab_stop c
    announce_step 3 "$STEP_N" "$((STEP_N / 1000))K" --max-seconds "$BIG_LIMIT_S" --progress-s 10
    if ((BIG)); then
        announce_step 4 1000000 1M --max-seconds "$BIG_LIMIT_S" --progress-s 10
    else
        say "  (RESOLVE_BENCH_BIG=0: the 1M step skipped)"
    fi
}

# ================================================================================================
# Part 4: registrations at a member of a gateway group beside a gateway alone
# ================================================================================================
GROUP_IP=198.18.250.21  # A's address on the store's management network (lib_etcd.sh's 198.18.250.0/24)
GROUP_CONF_ALONE=       # A's config before [cluster] was added, while A runs as a member
a_is_active() { [[ $(lab_ctl a cluster status --json 2>/dev/null | jq_py "r['role']" 2>/dev/null) == active ]]; }
a_holds_announced() { local n; n=$(gstat a "['resolution']['cache']['announced']" 2>/dev/null) && ((n >= $1)); }
reg_rate() { # reg_rate LINE — the rate in register-many's line ("... in S s (R/s), ..."); 0 if none
    if [[ $1 =~ \(([0-9]+)/s\) ]]; then echo "${BASH_REMATCH[1]}"; else echo 0; fi
}
group_burst() { # group_burst WARM_NODE NODE: A's node registers GROUP_N as 1.NODE.* at A; prints the tool's line
    local line
    # Uncounted first: a gateway just started has no neighbour entry for the node yet, and the
    # replies it cannot send (neighbour_unresolved) would be timed as retries.
    register_many a 1 "$1" 16 >/dev/null || true
    if line=$(register_many a 1 "$2" "$GROUP_N"); then echo "$line"; else echo "FAILED: $line"; fi
}
group_leave() { # A runs alone again on its original config; the store goes
    if [[ -n $GROUP_CONF_ALONE ]]; then
        lab_stop a
        cp "$GROUP_CONF_ALONE" "$A_CONF"
        GROUP_CONF_ALONE=
        lab_start a
        say "  A stopped (exit $LAB_RC) and started again alone"
    fi
    etcd_down
}

run_part4() {
    if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
        say "== part 4: skipped: etcd or etcdctl is not installed (tools/deps.sh installs etcd-server etcd-client)"
        result "part 4: skipped (no etcd on this machine)"
        return
    fi
    bring_lab_up
    say "== part 4: registrations at gateway A alone, then at A as the active member of a group" \
        "(store: $STORE_TEXT on this machine; $GROUP_N registrations each, window $WINDOW; segments deleted in transactions of up to $TXN_OPS)"
    local alone_line member_line alone member held store_n
    alone_line=$(group_burst 7 5)
    say "  A alone: $alone_line"
    # What A's cache held (B's announced records): A restarted waits for as much, so that the member
    # burst does not run beside the announce snapshot the alone burst never saw.
    held=$(gstat a "['resolution']['cache']['announced']")

    say "  store: $STORE_TEXT, prefix ${LAB_PREFIX}et"
    # etcd refuses a transaction over its --max-txn-ops (128 unless told): the store and the
    # member agree on the size. 128 leaves etcd as it comes.
    local max_txn=''
    ((TXN_OPS > 128)) && max_txn=$TXN_OPS
    if ! TMPDIR=$ETCD_TMP ETCD_MEMBERS=$ETCD_MEMBERS ETCD_MAX_TXN_OPS=$max_txn etcd_up "${LAB_PREFIX}et" ||
        ! etcd_attach "$NS_A_GW" "$GROUP_IP"; then
        result "part 4: FAILED (the etcd cluster did not come up)"
        smoke_fail "part 4: the etcd cluster did not come up"
        etcd_down
        return
    fi
    lab_stop a
    GROUP_CONF_ALONE=$WORK/a-alone.toml
    cp "$A_CONF" "$GROUP_CONF_ALONE"
    printf '\n[cluster]\netcd = [%s]\nmember = "a1"\nlease_ttl_s = 2\ntxn_ops = %s\n' \
        "$(printf '"%s", ' "${ETCD_URLS[@]}" | sed 's/, $//')" "$TXN_OPS" >>"$A_CONF"
    lab_start a
    say "  A stopped (exit $LAB_RC) and started again as member a1 of a group"
    if ! wait_until 120 "A to be the active member" a_is_active; then
        tail -20 "$LAB_LOGS/a.log" >&2
        result "part 4: FAILED (A did not become the active member)"
        smoke_fail "part 4: A did not become the active member"
        group_leave
        return
    fi
    wait_until "$ANNOUNCE_LIMIT_S" "A to hold the $held announced records it held alone" a_holds_announced "$held" ||
        say "  NOTE: A holds $(gstat a "['resolution']['cache']['announced']") of $held announced records: the burst runs beside the snapshot"
    local writes0 write_ms0 writes write_ms
    writes0=$(gstat a "['resolution']['directory']['store_writes']")
    write_ms0=$(gstat a "['resolution']['directory']['store_write_ms']")
    member_line=$(group_burst 8 6)
    say "  A member: $member_line"
    writes=$(($(gstat a "['resolution']['directory']['store_writes']") - writes0))
    write_ms=$(($(gstat a "['resolution']['directory']['store_write_ms']") - write_ms0))
    ((writes > 0)) && say "  A member: $writes writes to the store, $((GROUP_N / writes)) registrations and" \
        "$((write_ms / writes)) ms each on average"
    store_n=$(etcd_processes alpha)
    say "  the store holds $store_n of alpha's processes in $(etcd_ctl get --prefix /fedgate/alpha/processes/ --keys-only | grep -c . || true) segments (the burst and the warm-up's 16); A (role, store healthy): $(lab_ctl a cluster status --json | jq_py "r['role'], r['store']['healthy']")"
    group_leave

    alone=$(reg_rate "$alone_line")
    member=$(reg_rate "$member_line")
    result "$(printf 'part 4: %-34s %7s registrations/s' "gateway A alone" "$alone")"
    result "$(printf 'part 4: %-34s %7s registrations/s (each written to the store before it is answered)' \
        "A, the active member of a group" "$member")"
    result "part 4: ratio alone/member $("$PY" -c "import sys; a, m = map(int, sys.argv[1:]); print(f'{a / m:.2f}' if m else 'n/a')" \
        "$alone" "$member") (the aim: at most 2; store: $STORE_TEXT on the same machine; $GROUP_N registrations, window $WINDOW, txn_ops $TXN_OPS)"
    if ((SMOKE)); then
        ((alone > 0)) || smoke_fail "part 4: no registration rate at A alone ($alone_line)"
        ((member > 0)) || smoke_fail "part 4: no registration rate at A as a member ($member_line)"
    fi
}

START=$SECONDS
# Everything here shares the machine's CPUs with whatever else runs: say how busy it was.
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
part 1 && run_part1
part 2 && run_part2
part 3 && run_part3
part 4 && run_part4
if ((LAB_IS_UP)); then
    say "== drops by reason in the lab"
    for g in a b; do
        say "  $g: $(lab_ctl "$g" stats --json | jq_py "{k: v for k, v in r['drops_by_reason'].items() if v} or 'none'")"
    done
fi

echo
echo "== summary (resolve_bench.sh $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS - START)) s, $(nproc) CPUs," \
    "load average $LOAD0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
for l in "${SUMMARY[@]}"; do echo "  $l"; done
# Smoke mode checks that every part produced its figures (never how fast).
if ((SMOKE)); then
    if ((${#SMOKE_FAILS[@]})); then
        printf 'resolve_bench: %s\n' "${SMOKE_FAILS[@]}" >&2
        exit 1
    fi
    echo "resolve_bench: smoke run complete"
fi
