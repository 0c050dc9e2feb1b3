#!/usr/bin/env bash
# tests/bench/roce_bench.sh — RoCE v2 translation speed beside the reference, on the same vdevs.
#
# For each payload size (ROCE_BENCH_PAYLOADS, default "64 1024": the smallest, and the largest RDMA
# MTU 1500-byte ports carry), a pcap of 1024 RC SEND MIDDLE packets from a node to the virtual QPN
# of one RDMA connection (fedgate_bench_roce pcap) is read by net_pcap (infinite_rx=1) and sent out
# of a net_null port: first by dpdk-testpmd in io mode, then by the fedgate data plane
# (fedgate_bench_roce run), which translates every packet as the gateway does for that connection
# (addresses, DestQP, ICRC). Both forward on lcore 1 for the same time; the figure is the ratio of
# packets per second sent on port 1, and for fedgate the large-payload rate over the 64-byte one
# (the ICRC update does not read the payload, so it should stay near 1; net_pcap copies every
# packet it replays, for both forwarders alike).
#
# Jumbo frames (4096-byte RDMA MTU) need multi-segment mbufs on these vdevs; not measured here.
#
# usage: roce_bench.sh BUILD_DIR [SECONDS | --smoke]   (root; about 2 x SECONDS + start-up per size)
#   --smoke    3 seconds per run: checks the benchmark still runs and translates (CI)
set -euo pipefail
BUILD=$(realpath "${1:?usage: roce_bench.sh BUILD_DIR [SECONDS | --smoke]}")
SECS=${2:-10}
SMOKE=0
if [[ $SECS == --smoke ]]; then
    SMOKE=1
    SECS=3
fi
PAYLOADS=${ROCE_BENCH_PAYLOADS:-64 1024}
[[ $SECS =~ ^[0-9]+$ ]] && ((SECS >= 3)) || { echo "roce_bench: SECONDS must be >= 3 (or --smoke)" >&2; exit 2; }
for p in $PAYLOADS; do
    [[ $p =~ ^[0-9]+$ ]] && ((p <= 1024)) || { echo "roce_bench: payload '$p' must be 0..1024" >&2; exit 2; }
done
[[ $(id -u) -eq 0 ]] || { echo "roce_bench: run as root (EAL)" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "roce_bench: dpdk-testpmd not found (apt-get install dpdk)" >&2; exit 1; }
[[ -x $BUILD/tests/fedgate_bench_roce ]] || { echo "roce_bench: $BUILD/tests/fedgate_bench_roce missing: build first" >&2; exit 1; }

WORK=$(mktemp -d /tmp/fedgate-rocebench.XXXXXX)
TP_PREFIX=fgroce-tp-$$
PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    rm -rf "$WORK" "/var/run/dpdk/$TP_PREFIX"
}
trap cleanup EXIT
# shellcheck source=tests/bench/testpmd_rate.sh
source "$(dirname "$0")/testpmd_rate.sh"

PACKETS=1024
MBUFS=16383  # fedgate_bench_roce's pool; testpmd gets the same
EAL_MB=256   # --no-huge: a 2176-byte mbuf takes a 4 KB page

RESULTS=()
for P in $PAYLOADS; do
    PCAP="$WORK/roce-$P.pcap"
    "$BUILD/tests/fedgate_bench_roce" pcap "$PCAP" "$P" "$PACKETS"
    echo "== payload $P bytes"

    # --- the reference: testpmd io forwarding port 0 -> port 1 on lcore 1 ---
    stdbuf -oL dpdk-testpmd -l 0,1 --no-huge --no-shconf -m "$EAL_MB" --no-pci --log-level lib.eal:error \
        --file-prefix "$TP_PREFIX" --vdev "net_pcap0,rx_pcap=$PCAP,infinite_rx=1" --vdev "net_null0,no-rx=1" -- \
        --forward-mode=io --nb-cores=1 --auto-start --stats-period 1 --total-num-mbufs="$MBUFS" \
        --no-mlockall >"$WORK/testpmd.log" 2>&1 &
    PIDS+=($!)
    testpmd_await_blocks "$WORK/testpmd.log" 1 "${PIDS[0]}" 1 600
    sleep $((SECS + 2))  # at least two prints after the first
    stop_all
    # testpmd's own Tx-pps of port 1 (over the time since its last print, which stretches beyond
    # --stats-period on a loaded 2-core machine), averaged over the prints after the first.
    tp_pps=$(awk '/NIC statistics for port 1/ {p=1; next} /NIC statistics for port 0/ {p=0}
                  p && /Tx-pps:/ {v[n++] = $2} END {s = 0; for (i = 1; i < n; i++) s += v[i];
                  if (n > 1) printf "%d", s / (n - 1); else print 0}' "$WORK/testpmd.log")
    if [[ $tp_pps == 0 ]]; then
        echo "roce_bench: testpmd measured nothing for payload $P; its log:" >&2
        tail -20 "$WORK/testpmd.log" >&2
    fi
    rm -rf "/var/run/dpdk/$TP_PREFIX"

    # --- the fedgate data plane on the same vdevs, lcore 1 ---
    line=$("$BUILD/tests/fedgate_bench_roce" run "$PCAP" "$SECS" "$EAL_MB" 2>"$WORK/fg.log" | grep '^roce_pps ' || true)
    if [[ -z $line ]]; then
        echo "roce_bench: fedgate_bench_roce failed for payload $P:" >&2
        cat "$WORK/fg.log" >&2
        exit 1
    fi
    read -r _ fg_pps _ rx _ drops _ translated <<<"$line"
    echo "   fedgate: $line"
    if ((SMOKE)); then
        # The smoke run checks the path works: packets translated, none dropped.
        ((translated > 0 && drops == 0)) || { echo "roce_bench: smoke: translated $translated, drops $drops" >&2; exit 1; }
    fi
    RESULTS+=("$P $fg_pps $tp_pps")
done

/usr/bin/python3 - "${RESULTS[@]}" <<'PY'
import sys
rows = [list(map(int, r.split())) for r in sys.argv[1:]]
print()
print("RoCE v2 RC SEND MIDDLE, one connection, net_pcap infinite_rx -> net_null, lcore 1; Mpps sent on port 1")
print(f"{'payload':>8} {'fedgate':>9} {'testpmd io':>11} {'ratio':>6}")
for p, fg, tp in rows:
    print(f"{p:>8} {fg / 1e6:>9.2f} {tp / 1e6:>11.2f} {(f'{fg / tp:.2f}' if tp else '-'):>6}")
if len(rows) > 1 and rows[0][1] and rows[0][2]:
    small, large = rows[0], rows[-1]
    print(f"payload {large[0]} over payload {small[0]}: fedgate {large[1] / small[1]:.2f}, "
          f"testpmd io {large[2] / small[2]:.2f}")
PY
