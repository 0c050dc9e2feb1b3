#!/usr/bin/env bash
# The generated bash completion scripts at work: each is sourced into a plain bash (no
# bash-completion package) and its function asked to complete command lines, as bash does on TAB;
# COMPREPLY must hold exactly the expected words.
# usage: completion.sh COMPLETION_DIR     (the build's tools/completions: fedgatectl, fedgate-node)
# ok and fail always succeed, so "test && ok || fail" is an if-else.
# shellcheck disable=SC2015
set -euo pipefail
DIR=$(realpath "${1:?usage: completion.sh COMPLETION_DIR}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
ok() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }

for prog in fedgatectl fedgate-node; do
    [[ -s $DIR/$prog ]] || { fail "$DIR/$prog is missing or empty"; exit 1; }
    out=$(bash -n "$DIR/$prog" 2>&1) && ok "bash -n $prog's script" || fail "bash -n $prog's script: $out"
    # shellcheck disable=SC1090
    source "$DIR/$prog"
done
complete -p fedgatectl | grep -q -- '-F _fedgatectl fedgatectl$' && ok "complete -F _fedgatectl fedgatectl" ||
    fail "fedgatectl has no completion function: $(complete -p fedgatectl 2>&1)"
complete -p fedgate-node | grep -q -- '-F _fedgate_node fedgate-node$' && ok "complete -F _fedgate_node fedgate-node" ||
    fail "fedgate-node has no completion function: $(complete -p fedgate-node 2>&1)"
declare -F _init_completion >/dev/null && fail "_init_completion is defined: the test must run without bash-completion" || true

# expect "LINE" WANT...: completes LINE (the cursor at its end) as bash splits it, '=' a word of its
# own as COMP_WORDBREAKS has it; COMPREPLY, sorted, must be WANT (none: empty).
expect() {
    local line=$1 fn
    shift
    local -a words
    read -ra words <<<"${line//=/ = }"
    [[ $line == *" " || $line == *"=" ]] && words+=("")
    [[ ${words[0]} == fedgate-node ]] && fn=_fedgate_node || fn=_fedgatectl
    COMP_WORDS=("${words[@]}") COMP_CWORD=$((${#words[@]} - 1)) COMP_LINE=$line COMP_POINT=${#line}
    COMPREPLY=()
    "$fn" "${words[0]}" "${words[COMP_CWORD]}" "${words[COMP_CWORD - 1]}"
    local got want
    got=$(printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    ((${#COMPREPLY[@]})) || got=""
    (($#)) || want=""
    [[ $got == "$want" ]] && ok "'$line<TAB>' -> ${want:-nothing}" || fail "'$line<TAB>': got '$got', want '$want'"
}

# Command words, several to a command, each offered once.
expect "fedgatectl ma" map
expect "fedgatectl map add " export import
expect "fedgatectl map add i" import
expect "fedgatectl map " add del list nft
expect "fedgatectl " status stats ping map session dir resolve capture conn log reload cluster completion help
expect "fedgatectl st" stats status
expect "fedgatectl nosuch " 
# Global options before the command, with and without a value, are skipped.
expect "fedgatectl --socket /run/x.sock -j map add " export import
expect "fedgatectl --json --socket=/run/x.sock dir " list show
# A command's options, and the choices of a value.
expect "fedgatectl map add import --pr" --proto
expect "fedgatectl map add import --peer" --peer --peer-port
expect "fedgatectl map add import --proto " tcp udp
expect "fedgatectl map add import --proto u" udp
expect "fedgatectl map add import --proto=" tcp udp
expect "fedgatectl map add import --cluster " 
expect "fedgatectl map add import --cluster c1 --proto tcp --al" --allow
expect "fedgatectl -" --socket --json --help --version
expect "fedgatectl ping --" --count --timeout-ms --socket --json --help --version
# Operands: choices where the table names them, command words after help, nothing for a PID.
expect "fedgatectl map del " import export --proto --port --cluster
expect "fedgatectl map del import " --proto --port --cluster
expect "fedgatectl completion " bash
expect "fedgatectl help map " add del list nft
expect "fedgatectl help lo" log
expect "fedgatectl dir show " 
# File names for PATH and FILE values.
mkdir "$WORK/run"
touch "$WORK/run/fedgated.sock" "$WORK/run/other" "$WORK/capture.pcap"
expect "fedgatectl --socket $WORK/run/fed" "$WORK/run/fedgated.sock"
expect "fedgatectl --socket=$WORK/run/fed" "$WORK/run/fedgated.sock"
expect "fedgatectl capture --port internal -w $WORK/cap" "$WORK/capture.pcap"
expect "fedgatectl capture --write $WORK/r" "$WORK/run"
# fedgate-node.
expect "fedgate-node --gateway 198.18.1.1 con" connect
expect "fedgate-node --gateway 198.18.1.1:7410 --tries 3 re" register resolve
expect "fedgate-node connect --transport " auto rdma tcp
expect "fedgate-node register --transport r" roce_v2
expect "fedgate-node register --o" --once
expect "fedgate-node --ga" --gateway
expect "fedgate-node help ex" expose

if ((failures)); then
    echo "$failures checks failed"
    exit 1
fi
echo "all checks passed"
