#!/usr/bin/env bash
# tests/bench/echo_bench.sh — data-plane speed beside the reference, in one run on the same vdevs.
#
# Both fedgated and dpdk-testpmd (--forward-mode=icmpecho) answer ICMP echo requests read from
# net_pcap (infinite_rx=1, a pcap of many requests) on one lcore, with a net_null second port;
# each runs for the same time and the figure is the ratio of replies per second. Only the EAL
# layout and the vdevs are shared; nothing crosses a network.
# usage: echo_bench.sh BUILD_DIR [SECONDS]
#        echo_bench.sh BUILD_DIR --smoke      (CI: 6 s each; checks both answered)
set -euo pipefail
BUILD=$(realpath "${1:?usage: echo_bench.sh BUILD_DIR [SECONDS] | --smoke}")
SMOKE=0
if [[ ${2:-} == --smoke ]]; then
    source "$(dirname "$0")/smoke.sh"
    bench_smoke_guard "$BUILD" "EAL"
    # testpmd's rate needs four stats blocks (slower than one a second on a busy machine);
    # fedgated's, 2 s of warm-up and more.
    SMOKE=1 SECS=6
else
    SECS=${2:-10}
fi
[[ $SECS =~ ^[0-9]+$ ]] && ((SECS >= 2)) || { echo "echo_bench: SECONDS must be >= 2" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "echo_bench: run as root (EAL)" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "echo_bench: dpdk-testpmd not found (apt-get install dpdk-dev)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/fedgate-bench.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK" /var/run/dpdk/fgbench-tp /var/run/dpdk/fgbench-fg
}
trap cleanup EXIT
# shellcheck source=tests/bench/testpmd_rate.sh
source "$(dirname "$0")/testpmd_rate.sh"

"$BUILD/tests/fedgate_bench_pcap" "$WORK/echo.pcap" 198.18.1.1 1024
RX_VDEV="net_pcap0,rx_pcap=$WORK/echo.pcap,infinite_rx=1"
NULL_VDEV="net_null0,no-rx=1"
EAL_COMMON=(-l 0,1 --no-huge --no-shconf -m 512 --no-pci --log-level lib.eal:error)

# --- the reference: testpmd answering echo on the same vdevs, forwarding lcore 1 ---
# Line-buffered, so the wait below sees the first stats block when it is printed.
stdbuf -oL dpdk-testpmd "${EAL_COMMON[@]}" --file-prefix fgbench-tp --vdev "$RX_VDEV" --vdev "$NULL_VDEV" -- \
    --forward-mode=icmpecho --port-topology=loop --auto-start --stats-period 1 --total-num-mbufs=16384 \
    --no-mlockall > >(testpmd_stamp >"$WORK/testpmd.log") 2>&1 &
PIDS+=($!)
# Its start-up takes seconds on a busy machine: time from the first stats block, as nat_bench.sh does.
testpmd_run_window "$WORK/testpmd.log" 0 "${PIDS[0]}" "$SECS" 600
kill -INT "${PIDS[0]}"
wait "${PIDS[0]}" || true
PIDS=()
# Port 0's TX packets per second over the stamps' times (tests/bench/testpmd_rate.sh; before
# 2026-12-05 this took a stats block's growth as a second's, and the blocks come every 2 s).
tp_pps=$(testpmd_tx_rate "$WORK/testpmd.log" 0)

# --- fedgated on the same vdevs, data plane on lcore 1, never sleeping ---
cat >"$WORK/bench.toml" <<TOML
[gateway]
party = "bench"
party_id = 1
socket = "$WORK/fedgated.sock"
state_dir = "$WORK/state"
[eal]
args = ["-l", "0,1", "--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--file-prefix", "fgbench-fg", "--log-level", "lib.eal:error"]
[dataplane]
idle = "spin"
mbufs = 16383
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
TOML
"$BUILD/controlplane/fedgated" --config "$WORK/bench.toml" >"$WORK/fedgated.log" 2>&1 &
PIDS+=($!)
ctl() { "$BUILD/tools/fedgatectl" --socket "$WORK/fedgated.sock" "$@"; }
for _ in $(seq 300); do ctl status >/dev/null 2>&1 && break; sleep 0.1; done
replies() { ctl stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["icmp"]["echo_replies_sent"])'; }
sleep 2  # the same warm-up testpmd's first two periods get
r0=$(replies); t0=$(date +%s.%N)
sleep $((SECS - 2))
r1=$(replies); t1=$(date +%s.%N)
fg_pps=$(python3 -c "print(int(($r1 - $r0) / ($t1 - $t0)))")
drops=$(ctl stats --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sum(p["drops"] for p in r["ports"]))')

python3 - "$fg_pps" "$tp_pps" "$drops" <<'PY'
import sys
fg, tp, drops = (int(x) for x in sys.argv[1:])
print(f"echo replies/s   fedgated {fg:>12,}   dpdk-testpmd icmpecho {tp:>12,}")
print(f"ratio fedgated/testpmd: {fg / tp:.2f}" if tp else "ratio: testpmd measured nothing")
print(f"fedgated drops during the run: {drops}")
PY
# Smoke mode checks that both answered and the table was printed (never how fast).
if ((SMOKE)); then
    [[ $fg_pps =~ ^[0-9]+$ && $fg_pps -gt 0 && $tp_pps =~ ^[0-9]+$ && $tp_pps -gt 0 ]] ||
        { echo "echo_bench: fedgated ($fg_pps replies/s) or testpmd ($tp_pps replies/s) answered nothing" >&2; exit 1; }
    echo "echo_bench: smoke run complete"
fi
