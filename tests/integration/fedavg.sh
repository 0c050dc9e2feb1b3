#!/usr/bin/env bash
# Integration: the FedAvg example (examples/fedavg/run.sh) with 32 MiB models, an aggregator in
# party alpha and two trainers in party beta, through both gateways each way that exists in this
# build: gRPC through a static port map, gRPC through fedgate-node expose/forward by process ID, and
# the fedgate Python module. Every run finishes all rounds, every trainer takes part in every round,
# the model bytes cross gateway A's external port, the final checksums are identical, and training
# changed the model. run.sh cleans the lab up on any exit.
# usage: fedavg.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
/usr/bin/python3 -c "import numpy, grpc" ||
    { echo "fedavg.sh: python3-numpy or python3-grpcio is missing (tools/deps.sh installs them)"; exit 1; }

BUILD=$(realpath "${1:?usage: fedavg.sh BUILD_DIR}")
HERE=$(cd "$(dirname "$0")" && pwd)
RUN=$HERE/../../examples/fedavg/run.sh
ROUNDS=3
MODEL_MIB=32
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# The job is the Release build's: under ASan+UBSan the module needs libasan preloaded into python3
# and the run takes minutes; the sanitizer build covers the same code in python_module,
# integration_sidecar and integration_connect.
if grep -q 'FEDGATE_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "SKIP: the FL job runs in the Release build (this one is ASan+UBSan)"
    exit 77
fi

# All three ways, always: the port map, the sidecar and the Python module are all part of the build.
WAYS=(grpc-portmap grpc-pid fedgate)
[[ -n $(find "$BUILD/client/python" -name 'fedgate*.so' -print -quit 2>/dev/null) ]] ||
    { echo "fedavg: no fedgate Python module under $BUILD/client/python: build it first" >&2; exit 1; }

rc=0
"$RUN" "$BUILD" --no-build --prefix "f$((RANDOM % 1000))" --out "$OUT" --rounds "$ROUNDS" --model-mib "$MODEL_MIB" \
    --transport "$(IFS=,; echo "${WAYS[*]}")" || rc=$?
echo

# lab_check and lab_eq, the integration tests' own (run.sh brought the lab up and down itself).
source "$HERE/../../tools/lab.sh"
field() { # field WAY NAME — the value after NAME on the aggregator's final line
    sed -n "s/^final model sha256 .* $2 \([^ ]*\).*/\1/p" "$OUT/$1.aggregator.log" 2>/dev/null
}

lab_check "run.sh exits 0 (every way finished, checksums identical)" lab_eq "$rc" 0
# Each message is at least MODEL_MIB: the model goes to 2 trainers and comes back, every round.
min_bytes=$((2 * 2 * ROUNDS * MODEL_MIB * 1048576))
declare -A FINAL=() INITIAL=()
for w in "${WAYS[@]}"; do
    FINAL[$w]=$(sed -n 's/^final model sha256 \([0-9a-f]\{64\}\) .*/\1/p' "$OUT/$w.aggregator.log" 2>/dev/null)
    INITIAL[$w]=$(sed -n 's/^initial model sha256 \([0-9a-f]\{64\}\)$/\1/p' "$OUT/$w.aggregator.log" 2>/dev/null)
    lab_check "$w: the aggregator finished round $ROUNDS/$ROUNDS" grep -q "^round $ROUNDS/$ROUNDS: " "$OUT/$w.aggregator.log"
    lab_check "$w: the final line counts $ROUNDS rounds" lab_eq "$(field "$w" rounds)" "$ROUNDS"
    lab_check "$w: at least 2 x 2 x $ROUNDS x $MODEL_MIB MiB moved" lab_eq "$(( $(field "$w" bytes || echo 0) >= min_bytes ))" 1
    lab_check "$w: the model bytes crossed between the parties (gateway A's external port)" \
        lab_eq "$(( $(cat "$OUT/$w.crossed" 2>/dev/null || echo 0) >= min_bytes ))" 1
    for k in 1 2; do
        lab_check "$w: trainer $k trained every round and left" grep -q "^trainer $k done after $ROUNDS rounds$" \
            "$OUT/$w.trainer$k.log"
    done
    lab_check "$w: a final checksum" lab_eq "${#FINAL[$w]}" 64
done
first=${WAYS[0]}
for w in "${WAYS[@]:1}"; do
    lab_check "$w's final model is bit-identical to $first's" lab_eq "${FINAL[$w]}" "${FINAL[$first]}"
    lab_check "$w started from the same initial model as $first" lab_eq "${INITIAL[$w]}" "${INITIAL[$first]}"
done
lab_check "training changed the model (final checksum differs from the initial one)" \
    bash -c "[[ -n '${INITIAL[$first]}' && '${FINAL[$first]}' != '${INITIAL[$first]}' ]]"
lab_check "the validation accuracy rose over the rounds" python3 - "$OUT/$first.aggregator.log" <<'PY'
import re, sys
acc = [float(m.group(1)) for m in re.finditer(r"^round \d+(?:/\d+)?: validation loss \S+ accuracy ([0-9.]+)",
                                             open(sys.argv[1]).read(), re.M)]
sys.exit(0 if len(acc) >= 2 and acc[-1] > acc[0] + 0.1 else 1)
PY

echo
echo "ways run: ${WAYS[*]}"
((LAB_FAILURES == 0)) || { echo "fedavg: $LAB_FAILURES check(s) failed"; exit 1; }
echo "fedavg: all checks passed"
