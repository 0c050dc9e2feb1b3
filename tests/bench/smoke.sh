# shellcheck shell=bash
# tests/bench/smoke.sh — sourced by the bench scripts for their --smoke mode (ctest bench_*_smoke).

# bench_smoke_guard BUILD_DIR WHY-ROOT — skips (exit 77, saying why) where a smoke run cannot or
# should not run: without root, and on a sanitizer build, whose figures mean nothing.
bench_smoke_guard() {
    [[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root ($2)"; exit 77; }
    if grep -q 'FEDGATE_SANITIZE:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null; then
        echo "SKIP: benchmarks run on the Release build (this one is ASan+UBSan)"
        exit 77
    fi
}
