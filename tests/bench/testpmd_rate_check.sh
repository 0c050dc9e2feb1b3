#!/usr/bin/env bash
# tests/bench/testpmd_rate_check.sh — checks tests/bench/testpmd_rate.sh, the reference rate every
# testpmd benchmark reports, on stamped logs written here (no testpmd, no root): blocks two seconds
# apart give the counter's growth over two seconds, not per block; the first two blocks are
# warm-up; fewer than four blocks give 0; only the asked port's blocks count; the waits end on
# the blocks or on testpmd's exit; and the stamping filter prefixes each line with a time that
# does not go back.
# usage: testpmd_rate_check.sh            (a ctest: bench_testpmd_rate_check)
set -euo pipefail
# shellcheck source=tests/bench/testpmd_rate.sh
source "$(dirname "$0")/testpmd_rate.sh"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILS=0
expect() { # expect WHAT GOT WANT
    if [[ $2 == "$3" ]]; then echo "ok: $1 = $2"; else echo "FAIL: $1 = '$2', expected '$3'" >&2; FAILS=$((FAILS + 1)); fi
}
# await LOG PORT PID N TRIES: testpmd_await_blocks in a shell of its own, its stderr with its
# output, then "returned" if it returned 0; cut off after 60 s (a hang fails the check).
await() {
    # shellcheck disable=SC2016 # the inner shell expands them
    timeout 60 bash -c 'source "$1"; shift; testpmd_await_blocks "$@" 2>&1 && echo returned' _ \
        "$(dirname "$0")/testpmd_rate.sh" "$@"
}

# A log as testpmd prints it, stamped: port 0 and port 1 blocks at times T, TX-packets of port 1
# growing by 100M a block (50M/s at a block every 2 s), port 0's by 7 a block.
block() { # block STAMP PORT TX
    cat <<B
$1   ######################## NIC statistics for port $2  ########################
$1   RX-packets: 5          RX-missed: 0          RX-bytes:  320
$1   RX-errors: 0
$1   RX-nombuf:  0
$1   TX-packets: $3          TX-errors: 0          TX-bytes:  0
$1
$1   Throughput (since last show)
$1   Rx-pps:            0          Rx-bps:            0
$1   Tx-pps:     49999999          Tx-bps:  25599999488
$1   ############################################################################
B
}
log=$WORK/two-seconds.log
for i in 0 1 2 3 4 5; do
    t=$((1000 + 2 * i)).250000
    block "$t" 0 $((7 * i)) >>"$log"
    block "$t" 1 $((100000000 * i)) >>"$log"
done
expect "blocks of port 1" "$(testpmd_blocks "$log" 1)" 6
expect "rate of port 1 at a block every 2 s" "$(testpmd_tx_rate "$log" 1)" 50000000
expect "growth per block of port 1" "$(testpmd_tx_per_block "$log" 1)" 100000000
expect "rate of port 0" "$(testpmd_tx_rate "$log" 0)" 3

# Uneven periods: from the third block (t=1004, 200M) to the last (t=1011, 900M): 700M over 7 s.
log=$WORK/uneven.log
times=(1000 1002 1004 1005 1009 1011)
counts=(0 100000000 200000000 300000000 700000000 900000000)
for i in "${!times[@]}"; do block "${times[i]}.000000" 1 "${counts[i]}" >>"$log"; done
expect "rate over uneven periods" "$(testpmd_tx_rate "$log" 1)" 100000000

# Three blocks are not enough (two of them warm-up): 0, which the scripts report as "measured nothing".
log=$WORK/short.log
: >"$log"
for i in 0 1 2; do block "100$i.000000" 1 $((10 * i)) >>"$log"; done
expect "rate from three blocks" "$(testpmd_tx_rate "$log" 1)" 0
expect "rate of a port with no blocks" "$(testpmd_tx_rate "$WORK/two-seconds.log" 2)" 0
# Before testpmd has written its log: a count of 0, and a wait that finds the file missing says
# nothing on stderr (it once fed an empty count to the shell's arithmetic).
expect "blocks in a log not written yet" "$(testpmd_blocks "$WORK/not-yet.log" 1)" 0
expect "await on a log not written yet" "$(await "$WORK/not-yet.log" 1 $$ 1 3)" returned

# The waits end on the blocks or on testpmd's exit, not on their bound: with a bound of hours, a
# log that holds the blocks, or a process that has exited, returns at once (timeout: a hang fails).
sleep 0 & gone=$!
wait "$gone"
expect "await with the blocks there" "$(await "$WORK/two-seconds.log" 1 $$ 6 100000)" returned
expect "await after testpmd exited" "$(await "$WORK/short.log" 1 "$gone" 4 100000)" returned

# The filter: every line stamped, stamps in order.
printf 'a\nb b\nc\n' | testpmd_stamp >"$WORK/stamped"
expect "stamped lines" "$(grep -cE '^[0-9]+\.[0-9]{6} ' "$WORK/stamped")" 3
expect "text after the stamp" "$(cut -d' ' -f2- "$WORK/stamped" | tr '\n' '|')" "a|b b|c|"
expect "stamps in order" "$(awk 'NR > 1 && $1 < prev {bad = 1} {prev = $1} END {print bad + 0}' "$WORK/stamped")" 0

((FAILS == 0)) || { echo "testpmd_rate_check: $FAILS check(s) failed" >&2; exit 1; }
echo "testpmd_rate_check: all checks passed"
