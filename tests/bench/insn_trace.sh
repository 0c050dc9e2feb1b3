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

# insn_trace_knobs PREFIX INSNS LISTING FUNCTION: a script's PREFIX_INSNS_LISTING and
# PREFIX_INSNS_FUNCTION knobs checked (PREFIX: NAT_BENCH, RESOLVE_BENCH), exiting 2 with a message
# that names the bad one; sets INSN_LISTING to the listing directory's absolute path (made here),
# empty for none. Called from the script's own shell, after PREFIX_INSNS is checked.
# shellcheck disable=SC2034  # INSN_LISTING is read by the sourcing script
insn_trace_knobs() {
    local prefix=$1 insns=$2 listing=$3 function=$4 script=${1,,}
    insn_trace_function "$function" >/dev/null ||
        { echo "$script: ${prefix}_INSNS_FUNCTION must be handle_burst or poll_once, got '$function'" >&2; exit 2; }
    INSN_LISTING=""
    [[ -n $listing ]] || return 0
    ((insns > 0)) || { echo "$script: ${prefix}_INSNS_LISTING needs ${prefix}_INSNS (the listing is the trace's)" >&2; exit 2; }
    if ! mkdir -p "$listing"; then
        echo "$script: ${prefix}_INSNS_LISTING '$listing' is not a directory that can be made" >&2
        exit 2
    fi
    INSN_LISTING=$(realpath "$listing")
}

# insn_trace_functions_shown FUNCTION: how many functions a summary lists (a burst's are inlined
# into a few; a poll's reach into the PMDs and the housekeeping).
insn_trace_functions_shown() { [[ $1 == poll_once ]] && echo 10 || echo 5; }

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
