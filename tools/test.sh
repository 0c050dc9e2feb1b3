#!/usr/bin/env bash
# tools/test.sh — the README's second command, and what CI runs: installs what is missing, then
# builds and runs every test: fuzzers (briefly), the meson build, the ctest suite under ASan+UBSan
# (all but the benchmark smokes, which measure nothing there), and the whole suite on the Release
# build. Warnings are errors throughout.
set -euo pipefail

usage() {
    cat <<'TXT'
usage: tools/test.sh [--quick] [--fuzz-seconds N]

Builds fedgate and runs every test; run as root (the EAL and network namespaces need it).
  1. apt-get installs what is missing (tools/deps.sh)
  2. fuzz targets built with clang/libFuzzer, each run for N seconds (default 30) from a copy of
     its corpus in tests/fuzz/corpus/<target>/ and made seeds (tools/fuzz.sh runs them longer)
  3. the meson build in meson_dpdk/ (the DPDK way of building the same daemon)
  4. ASan+UBSan build (build-asan/), the ctest suite less the benchmark smokes (label bench)
  5. Release build (build/), whole ctest suite: unit, EAL, integration
  --quick           skip 2-4 (Release build and its tests only)
  --fuzz-seconds N  time per fuzz target
Build directories sit in the source tree and are reused on the next run.
TXT
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0
FUZZ_SECONDS=30
while (($#)); do
    case $1 in
    --quick) QUICK=1 ;;
    --fuzz-seconds) FUZZ_SECONDS=${2:?--fuzz-seconds needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "test.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $FUZZ_SECONDS =~ ^[0-9]+$ ]] || { echo "test.sh: --fuzz-seconds wants a number" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "test.sh: run as root (EAL, network namespaces)" >&2; exit 1; }
cd "$ROOT"

step() { printf '\n== %s\n' "$*"; }
JOBS=$(nproc)

step "dependencies"
tools/deps.sh

cmake_version=$(sed -n 's/^project(fedgate VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
meson_version=$(sed -n "s/^  version: '\([0-9.]*\)',/\1/p" meson_dpdk/meson.build)
[[ $cmake_version == "$meson_version" ]] || {
    echo "test.sh: version differs: CMakeLists.txt $cmake_version, meson_dpdk/meson.build $meson_version" >&2
    exit 1
}

if ((!QUICK)); then
    step "fuzz targets (clang, libFuzzer), ${FUZZ_SECONDS}s each"
    CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATE_FUZZ=ON \
        -DFEDGATE_TESTS=ON -DFEDGATE_WERROR=ON >/dev/null
    cmake --build build-fuzz --target fuzz_packet fuzz_config fuzz_nat fuzz_resolve fuzz_handshake fuzz_announce fuzz_sync fuzz_store \
        fuzz_make_seeds -j "$JOBS"
    # Each target starts where the corpus kept in the tree left off (copied: a run leaves the tree
    # as it was; tools/fuzz.sh --merge writes a grown corpus back), plus the seeds that are made.
    rm -rf build-fuzz/corpus-* build-fuzz/artifacts
    mkdir -p build-fuzz/artifacts
    for t in packet config nat resolve handshake announce sync store; do
        mkdir -p "build-fuzz/corpus-$t"
        if [[ -d tests/fuzz/corpus/$t ]]; then cp -r "tests/fuzz/corpus/$t/." "build-fuzz/corpus-$t/"; fi
    done
    build-fuzz/tests/fuzz_make_seeds build-fuzz/corpus-packet
    build-fuzz/tests/fuzz_make_seeds build-fuzz/corpus-nat
    build-fuzz/tests/fuzz_make_seeds build-fuzz/corpus-resolve resolve
    cp dist/fedgate.toml.example build-fuzz/corpus-config/example.toml
    for t in packet config nat resolve handshake announce sync store; do
        build-fuzz/tests/fuzz_$t -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=10 \
            -artifact_prefix=build-fuzz/artifacts/ "build-fuzz/corpus-$t" 2>&1 | tail -n 4
    done

    step "meson build (meson_dpdk/)"
    [[ -f build-meson/build.ninja ]] || meson setup build-meson meson_dpdk --werror >/dev/null
    ninja -C build-meson
    build-meson/fedgated --version

    step "ASan+UBSan build and the suite (benchmark smokes run in the Release build)"
    # The unit tests as one process here (FEDGATE_TEST_EACH_CASE=OFF): an ASan process start costs
    # most of a second, which one process per case paid 750 times.
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFEDGATE_SANITIZE=ON -DFEDGATE_WERROR=ON \
        -DFEDGATE_TEST_EACH_CASE=OFF >/dev/null
    cmake --build build-asan -j "$JOBS"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        LSAN_OPTIONS=suppressions=$ROOT/tools/lsan.supp ctest --test-dir build-asan --output-on-failure --timeout 900 \
        --label-exclude bench
fi

step "Release build and the whole suite"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFEDGATE_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure --timeout 900
