# shellcheck shell=bash
# tests/bench/insn_trace.sh — sourced by nat_bench.sh and resolve_bench.sh (their NAT_BENCH_INSNS and
# RESOLVE_BENCH_INSNS): a running fedgated's data plane stepped under gdb through some bursts of
# Dataplane::handle_burst (tests/bench/insn_trace.py), its instructions a packet counted exactly.
INSN_TRACE_PY=$(dirname "${BASH_SOURCE[0]}")/insn_trace.py

# The functions a trace may step through, by the names the scripts' knobs take.
insn_trace_function() {
    case $1 in
    handle_burst | poll_once) echo "fedgate::Dataplane::$1" ;;
    *) return 1 ;;
    esac
}

# insn_trace PID CALLS OUT [LISTING] [FUNCTION]: steps PID's data-plane thread through CALLS calls of
# FUNCTION (handle_burst, the default: a burst; poll_once: a whole poll, the PMDs' receive and send
# included); OUT gets insn_trace.py's lines (packets, instructions, per_packet, function NAME COUNT),
# LISTING (where not empty) every instruction executed with its count a packet. gdb runs on CPU 0,
# away from the lcore it steps. Returns 1, saying why on stderr, when the trace failed or was cut short.
insn_trace() {
    local pid=$1 calls=$2 out=$3 listing=${4:-} function
    function=$(insn_trace_function "${5:-handle_burst}") || { echo "insn_trace: no function '${5:-}' to trace" >&2; return 1; }
    TRACE_CALLS=$calls TRACE_OUT=$out TRACE_LISTING=$listing TRACE_FUNCTION=$function taskset -c 0 \
        gdb -q -nx -p "$pid" -batch -x "$INSN_TRACE_PY" >"$out.gdb.log" 2>&1 || true
    if ! grep -q '^per_packet [0-9]' "$out" 2>/dev/null || grep -q '^truncated' "$out"; then
        echo "insn_trace: the trace of process $pid failed or was cut short; gdb said:" >&2
        tail -5 "$out.gdb.log" >&2
        return 1
    fi
}

# insn_trace_field OUT NAME: one of OUT's figures (packets, instructions, per_packet).
insn_trace_field() { awk -v k="$2" '$1 == k {print $2}' "$1"; }

# insn_trace_functions OUT [N]: the N (5) functions most of the instructions ran in, one a line, indented.
insn_trace_functions() {
    awk '$1 == "function" {n = $NF; $1 = ""; $NF = ""; printf "      %9d %s\n", n, $0}' "$1" | head -"${2:-5}"
}
