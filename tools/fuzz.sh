#!/usr/bin/env bash
# tools/fuzz.sh — long libFuzzer runs: builds the fuzz targets in build-fuzz/ if needed, runs each
# on a copy of its corpus kept in the tree (tests/fuzz/corpus/<target>/) plus the generated seeds,
# prints what each run reached, and with --merge writes the minimized corpus back into the tree.
set -euo pipefail

ALL_TARGETS=(packet config nat resolve handshake announce sync store)

usage() {
    cat <<'TXT'
usage: tools/fuzz.sh [--minutes N | --seconds N] [--targets a,b,...] [--merge] [--no-build]
                     [--build-dir DIR] [-- LIBFUZZER_FLAG...]

Runs each fuzz target for the time given, one after the other, on a copy of its in-tree corpus
(tests/fuzz/corpus/<target>/) and the seeds fuzz_make_seeds writes, then prints one row per target:

  target     the fuzzer (tests/fuzz/fuzz_<target>.cpp)
  execs      inputs run (libFuzzer's stat::number_of_executed_units)
  exec/s     their average rate
  cov        code edges covered at the end (libFuzzer's "cov:"), and at the start after loading
  ft         features (edges with hit counts, value profiles: libFuzzer's "ft:"), end and start
  corpus     inputs in the working corpus at the end, and their size
  result     ok, or crash/leak/timeout with the input that did it (kept under the build dir)

Options:
  --minutes N        time per target (default 5)
  --seconds N        time per target in seconds (for a quick check)
  --targets a,b      only these (default: packet,config,nat,resolve,handshake,announce,sync,store)
  --merge            after the runs, minimize each target's corpus (libFuzzer -merge=1) and write
                     it back to tests/fuzz/corpus/<target>/ (commit it, so the next run starts
                     there); without it the tree is left untouched
  --no-build         do not configure or build; use what is in the build dir
  --build-dir DIR    the clang/libFuzzer build dir (default build-fuzz, configured as
                     tools/test.sh does: RelWithDebInfo, FEDGATE_FUZZ=ON, FEDGATE_WERROR=ON)
  -- FLAGS           passed to every libFuzzer run (e.g. -- -jobs=2 -workers=2, -dict=FILE)
  -h, --help         this text

Runs niced (nice -n 15) and builds with at most 2 jobs, so it can share a small machine. Logs and
working corpora are in BUILD_DIR/fuzz-run/<target>/. Exits 1 if any target crashed.

Examples:
  tools/fuzz.sh --minutes 5 --merge            # the long run the README's figures come from
  tools/fuzz.sh --seconds 20 --targets resolve,announce
TXT
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_PER=300
TARGETS=("${ALL_TARGETS[@]}")
MERGE=0
BUILD=1
BUILD_DIR=build-fuzz
EXTRA=()
die() { echo "fuzz.sh: $*" >&2; exit 2; }
while (($#)); do
    case $1 in
    --minutes)
        [[ ${2:-} =~ ^[0-9]+$ ]] || die "--minutes wants a whole number"
        SECONDS_PER=$(($2 * 60)); shift ;;
    --seconds)
        [[ ${2:-} =~ ^[0-9]+$ ]] || die "--seconds wants a whole number"
        SECONDS_PER=$2; shift ;;
    --targets)
        [[ -n ${2:-} ]] || die "--targets wants a list, e.g. --targets packet,nat"
        IFS=, read -r -a TARGETS <<<"$2"; shift ;;
    --merge) MERGE=1 ;;
    --no-build) BUILD=0 ;;
    --build-dir) BUILD_DIR=${2:?--build-dir needs a directory}; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
((SECONDS_PER > 0)) || die "the time per target must be at least a second"
for t in "${TARGETS[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target '$t' (targets: ${ALL_TARGETS[*]})"
done
cd "$ROOT"
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR

if ((BUILD)); then
    command -v clang++ >/dev/null || die "clang++ not found (tools/deps.sh installs it)"
    if [[ ! -f $BUILD_DIR/build.ninja ]] || ! grep -q '^FEDGATE_FUZZ:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
        CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATE_FUZZ=ON \
            -DFEDGATE_TESTS=ON -DFEDGATE_WERROR=ON >/dev/null
    fi
    nice -n 15 cmake --build "$BUILD_DIR" --target "${TARGETS[@]/#/fuzz_}" fuzz_make_seeds -j 2 >/dev/null ||
        { echo "fuzz.sh: the build failed; run: cmake --build $BUILD_DIR --target fuzz_<target>" >&2; exit 1; }
fi

# Seeds that are made, not kept: packets from the test builder, sealed resolution messages, a config.
seeds() {
    local t=$1 dir=$2 make=$BUILD_DIR/tests/fuzz_make_seeds
    case $t in
    packet | nat) [[ -x $make ]] && "$make" "$dir" ;;
    resolve) [[ -x $make ]] && "$make" "$dir" resolve ;;
    config) cp dist/fedgate.toml.example "$dir/example.toml" ;;
    esac
    return 0
}

RUN=$BUILD_DIR/fuzz-run
mkdir -p "$RUN"
declare -A ROW
failed=0
for t in "${TARGETS[@]}"; do
    bin=$BUILD_DIR/tests/fuzz_$t
    [[ -x $bin ]] || die "$bin is missing (build it, or drop --no-build)"
    work=$RUN/$t
    rm -rf "$work"
    mkdir -p "$work/corpus" "$work/artifacts"
    if [[ -d tests/fuzz/corpus/$t ]]; then cp -r "tests/fuzz/corpus/$t/." "$work/corpus/"; fi
    seeds "$t" "$work/corpus"
    printf 'fuzz.sh: %s for %ss from %s inputs ...\n' "$t" "$SECONDS_PER" "$(find "$work/corpus" -type f | wc -l)" >&2
    rc=0
    nice -n 15 "$bin" -max_total_time="$SECONDS_PER" -print_final_stats=1 -timeout=10 \
        -artifact_prefix="$work/artifacts/" "${EXTRA[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -n 1)
    start=$(grep -m1 -E '^#[0-9]+[[:space:]]+INITED' "$work/log" || true)
    last=$(grep -E '^#[0-9]+[[:space:]].* cov: ' "$work/log" | tail -n 1 || true)
    field() { sed -n "s/.* $1: \([0-9]*\).*/\1/p" <<<"$2"; }
    files=$(find "$work/corpus" -type f | wc -l)
    kib=$(( ($(find "$work/corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}') + 1023) / 1024 ))
    result=ok
    if ((rc == 0)) && [[ -z $execs || -z $last ]]; then
        failed=1
        result="no figures in $work/log"
    elif ((rc != 0)); then
        failed=1
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/log" | tail -n 1)
        kind=$(basename "${artifact:-crash}" | cut -d- -f1)
        result="${kind:-crash} ${artifact:-(no input written; see $work/log)}"
    fi
    ROW[$t]=$(printf '%-10s %12s %8s %6s %-7s %6s %-7s %6s %7s  %s' "$t" "${execs:-?}" "${rate:-?}" \
        "$(field cov "$last")" "($(field cov "$start"))" "$(field ft "$last")" "($(field ft "$start"))" \
        "$files" "${kib}K" "$result")
done

if ((MERGE)); then
    for t in "${TARGETS[@]}"; do
        work=$RUN/$t
        [[ -z $(ls -A "$work/artifacts") ]] || { echo "fuzz.sh: $t crashed; its corpus is not merged" >&2; continue; }
        rm -rf "$work/merged"
        mkdir -p "$work/merged" "tests/fuzz/corpus/$t"
        # Inputs from the tree first, so that equal coverage keeps the files already committed.
        nice -n 15 "$BUILD_DIR/tests/fuzz_$t" -merge=1 -timeout=10 "$work/merged" "tests/fuzz/corpus/$t" \
            "$work/corpus" >"$work/merge.log" 2>&1 || { echo "fuzz.sh: merging $t failed, see $work/merge.log" >&2; continue; }
        rm -rf "tests/fuzz/corpus/$t"
        mv "$work/merged" "tests/fuzz/corpus/$t"
        printf 'fuzz.sh: tests/fuzz/corpus/%s: %s inputs, %s\n' "$t" "$(find "tests/fuzz/corpus/$t" -type f | wc -l)" \
            "$(du -sh "tests/fuzz/corpus/$t" | cut -f1)" >&2
    done
fi

printf '\n%s per target, %s, %s\n' "$(( SECONDS_PER >= 60 && SECONDS_PER % 60 == 0 ? SECONDS_PER / 60 : SECONDS_PER ))$(
    (( SECONDS_PER >= 60 && SECONDS_PER % 60 == 0 )) && echo ' min' || echo ' s')" "$(date -u +%Y-%m-%d)" "$(nproc) cores"
printf '%-10s %12s %8s %6s %-7s %6s %-7s %6s %7s  %s\n' target execs exec/s cov '(start)' ft '(start)' corpus size result
for t in "${TARGETS[@]}"; do echo "${ROW[$t]}"; done
exit "$failed"
