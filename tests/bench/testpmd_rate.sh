# shellcheck shell=bash
# tests/bench/testpmd_rate.sh — sourced by the bench scripts that take dpdk-testpmd as the reference
# (nat_bench.sh, resolve_bench.sh, echo_bench.sh): its packet rate from the stats it prints, and the
# waits for those stats (roce_bench.sh too, which takes testpmd's own Tx-pps instead).
#
# testpmd's --stats-period 1 does not print once a second: its main loop sleeps one second and
# prints when a whole period has passed by the EAL's timer, and where the EAL's estimate of the
# timer's frequency is a little high (as in the VMs these benchmarks run on) a second's sleep falls
# just short of it, so the blocks come every 2 seconds on an idle machine (later on a busy one). A rate
# taken as one block's growth per second counted two seconds' packets as one: resolve_bench.sh and
# echo_bench.sh did so before 2026-12-05 and reported their reference twice as fast as it was.
# Here every line is stamped with the monotonic clock as it arrives, and the rate is the growth of
# the cumulative TX-packets between two blocks over the time between their stamps.
#
#   testpmd_stamp               a filter (on CPU 0): stdin's lines, each prefixed "SECONDS "
#   testpmd_blocks LOG PORT     how many stats blocks of port PORT the stamped LOG holds
#   testpmd_await_blocks LOG PORT PID N TRIES
#                               waits (TRIES x 0.1 s at most) until LOG holds N blocks of PORT or
#                               testpmd (PID) has exited
#   testpmd_run_window LOG PORT PID SECS START_TRIES
#                               what each benchmark measures testpmd over: from its first block
#                               (start-up, loading the file, may take START_TRIES x 0.1 s), SECS
#                               seconds, then until the four blocks the rate needs are there (a
#                               loaded machine stretches the period; 30 s at most)
#   testpmd_tx_rate LOG PORT    port PORT's TX packets per second in the stamped LOG, from the third
#                               block (the first two are warm-up) to the last; 0 with fewer than four
#   testpmd_tx_per_block LOG PORT  the same growth per block instead of per second (what the
#                               scripts reported before; printed beside the rate for comparison)

# testpmd_interactive_argv MODE MB PREFIX RX_VDEV NULL_VDEV MBUFS MBUF_SIZE
#                               testpmd's command line in interactive mode (-i), forwarding in MODE
#                               from RX_VDEV to NULL_VDEV on lcore 1, as JSON (paired.py starts it)
testpmd_interactive_argv() {
    # shellcheck disable=SC2046 # eal_mem_args is several words on purpose
    "${PY:-/usr/bin/python3}" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' dpdk-testpmd -l 0,1 \
        $(eal_mem_args "$2") --no-shconf --no-pci --log-level lib.eal:error --file-prefix "$3" --vdev "$4" \
        --vdev "$5" -- -i --forward-mode="$1" --nb-cores=1 --total-num-mbufs="$6" --mbuf-size="$7" --no-mlockall
}

testpmd_stamp() {
    taskset -c 0 "${PY:-/usr/bin/python3}" -uc '
import sys, time
for line in sys.stdin:
    sys.stdout.write(f"{time.monotonic():.6f} {line}")'
}

# 0 too while LOG does not exist yet (grep prints nothing then).
testpmd_blocks() {
    local c
    c=$(grep -cs "NIC statistics for port $2" "$1") || true
    echo "${c:-0}"
}

testpmd_await_blocks() {
    local i
    for ((i = 0; i < $5; i++)); do
        (($(testpmd_blocks "$1" "$2") >= $4)) && return 0
        kill -0 "$3" 2>/dev/null || return 0
        sleep 0.1
    done
}

testpmd_run_window() {
    testpmd_await_blocks "$1" "$2" "$3" 1 "$5"
    sleep "$4"
    testpmd_await_blocks "$1" "$2" "$3" 4 300
}

# The TX-packets lines of port PORT's blocks as "STAMP COUNT".
testpmd_tx_lines() {
    awk -v port="NIC statistics for port $2" '$0 ~ port {p=1; next} /^[0-9.]+ *#+$/ {p=0}
        p && /TX-packets:/ {print $1, $3}' "$1"
}

testpmd_tx_rate() {
    testpmd_tx_lines "$1" "$2" | awk '{t[n] = $1; tx[n++] = $2}
        END {if (n > 3 && t[n-1] > t[2]) printf "%d\n", (tx[n-1] - tx[2]) / (t[n-1] - t[2]); else print 0}'
}

testpmd_tx_per_block() {
    testpmd_tx_lines "$1" "$2" | awk '{tx[n++] = $2} END {if (n > 3) printf "%d\n", (tx[n-1] - tx[2]) / (n - 3); else print 0}'
}
