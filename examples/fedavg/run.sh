#!/usr/bin/env bash
# examples/fedavg/run.sh — runs the FedAvg example (fedavg.py: an aggregator in party alpha, two
# trainers in party beta) through the two-party lab three ways, prints each run's final model
# checksum and whether all are identical. Cleans up the lab, its namespaces and every process on any
# exit.
set -euo pipefail

usage() {
    cat <<'TXT'
usage: examples/fedavg/run.sh BUILD_DIR [--transport T]... [--rounds N] [--model-mib M]
                              [--prefix P] [--out DIR] [--no-build]

Brings up the two-party lab (tools/lab.sh: gateway A of party alpha, gateway B of
party beta, a node behind each), runs the same FedAvg job once per transport and
compares the final models' SHA-256:

  grpc-portmap  gRPC; trainers serve on node b, A imports and B exports one port per
                trainer (fedgatectl map add), the aggregator on node a dials A's ports
  grpc-pid      the same gRPC code; each trainer is exposed by process ID
                (fedgate-node expose, node b) and reached through a local port
                (fedgate-node forward, node a)
  fedgate       the fedgate Python module: connections by process ID (import fedgate)

  --transport T  one of the three (repeat, or T1,T2); default: all three
  --rounds N     FedAvg rounds (default 3)
  --model-mib M  model size, MiB of float32 weights per message (default 32)
  --prefix P     lab namespace/interface prefix, [a-z0-9]{1,4} (default fl)
  --out DIR      keep every program's log in DIR (WAY.aggregator.log, WAY.trainerK.log, ...)
  --no-build     use BUILD_DIR as it is (default: configure it if needed and build the
                 gateway, fedgatectl, fedgate-node and the Python module)

Exit status: 0 when every run finished all rounds and all checksums are identical.
Needs root (network namespaces); Debian's python3-numpy and python3-grpcio.
TXT
}

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FEDAVG=$HERE/fedavg.py
PY=/usr/bin/python3
ALL_WAYS=(grpc-portmap grpc-pid fedgate)

BUILD="" WAYS=() ROUNDS=3 MODEL_MIB=32 OUT="" BUILD_IT=1
LAB_PREFIX=fl
while (($#)); do
    case $1 in
    --transport)
        IFS=, read -r -a more <<<"${2:?--transport needs a value}"
        WAYS+=("${more[@]}")
        shift ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --model-mib) MODEL_MIB=${2:?--model-mib needs a value}; shift ;;
    --prefix) LAB_PREFIX=${2:?--prefix needs a value}; shift ;;
    --out) OUT=${2:?--out needs a value}; shift ;;
    --no-build) BUILD_IT=0 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *)
        [[ -z $BUILD ]] || { echo "run.sh: one build directory only ('$BUILD' and '$1')" >&2; exit 2; }
        BUILD=$1 ;;
    esac
    shift
done
[[ -n $BUILD ]] || { usage >&2; exit 2; }
((${#WAYS[@]})) || WAYS=("${ALL_WAYS[@]}")
asked=" ${WAYS[*]} "
for w in "${WAYS[@]}"; do
    [[ " ${ALL_WAYS[*]} " == *" $w "* ]] || { echo "run.sh: unknown transport '$w' (want ${ALL_WAYS[*]})" >&2; exit 2; }
done
WAYS=()
for w in "${ALL_WAYS[@]}"; do  # each once, in the usual order
    [[ $asked != *" $w "* ]] || WAYS+=("$w")
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --rounds wants a positive integer" >&2; exit 2; }
[[ $MODEL_MIB =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run.sh: --model-mib wants a number of MiB" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run.sh: run as root (network namespaces, DPDK)" >&2; exit 1; }
$PY -c "import numpy, grpc" 2>/dev/null ||
    { echo "run.sh: $PY needs numpy and grpc (Debian: apt-get install python3-numpy python3-grpcio)" >&2; exit 1; }

LAB_BUILD=$(realpath -m "$BUILD")
NODE=$LAB_BUILD/tools/fedgate-node
if ((BUILD_IT)); then
    [[ -f $LAB_BUILD/CMakeCache.txt ]] ||
        cmake -S "$ROOT" -B "$LAB_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    targets=(fedgated fedgatectl fedgate-node)
    # The Python module's target exists only where pybind11 is installed.
    if cmake --build "$LAB_BUILD" --target help 2>/dev/null | grep -q '^fedgate_python:'; then
        targets+=(fedgate_python)
    fi
    cmake --build "$LAB_BUILD" --parallel "${FEDAVG_BUILD_JOBS:-$(nproc)}" --target "${targets[@]}"
fi
for f in controlplane/fedgated tools/fedgatectl tools/fedgate-node; do
    [[ -x $LAB_BUILD/$f ]] || { echo "run.sh: $LAB_BUILD/$f is missing (build it, or drop --no-build)" >&2; exit 1; }
done

# What each way needs beyond the gateways, checked before the lab comes up.
PYMOD_DIR=
for w in "${WAYS[@]}"; do
    case $w in
    grpc-pid)
        if ! { "$NODE" help expose && "$NODE" help forward; } >/dev/null 2>&1; then
            echo "run.sh: $NODE has no expose/forward commands (the sidecar), needed by grpc-pid" >&2
            exit 1
        fi ;;
    fedgate)
        PYMOD_DIR=$(find "$LAB_BUILD" -name 'fedgate*.so' -path '*python*' -printf '%h\n' 2>/dev/null | head -n 1)
        if [[ -z $PYMOD_DIR ]] || ! PYTHONPATH=$PYMOD_DIR $PY -c "import fedgate" 2>/dev/null; then
            echo "run.sh: no importable fedgate Python module under $LAB_BUILD, needed by --transport fedgate" >&2
            exit 1
        fi ;;
    esac
done

# shellcheck source=tools/lab.sh
source "$ROOT/tools/lab.sh"
if [[ -n $OUT ]]; then mkdir -p "$OUT"; WORK=$(realpath "$OUT"); else WORK=$(mktemp -d); fi
PIDS=()
stop_pids() { # SIGTERM to every process this script started (not the gateways), then reap them
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_pids
    lab_down
    [[ -n $OUT ]] || rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '\033[1m== %s\033[0m\n' "$*"; }
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# start NAME NS CMD... — in the background, output in $WORK/NAME.log; sets LAST_PID. `ip netns exec`
# execs the command, so the PID is the program itself and SIGTERM reaches it.
start() {
    local name=$1 ns=$2
    shift 2
    ip netns exec "$ns" "$@" >"$WORK/$name.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# wait_for WHAT PID CMD... — lab_wait, but gives up at once when PID (the program it waits on) dies.
wait_for() {
    local what=$1 pid=$2 deadline=$((SECONDS + LAB_TIMEOUT_S))
    shift 2
    until "$@" >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null; then echo "run.sh: exited while waiting for $what" >&2; return 1; fi
        if ((SECONDS >= deadline)); then echo "run.sh: timed out after ${LAB_TIMEOUT_S}s waiting for $what" >&2; return 1; fi
        sleep 0.1
    done
}
port_open() { in_ns "$1" ss -Hltn src "$2" | grep -q .; }  # port_open NS IP:PORT

TRAINERS=(1 2)
AGG_TIMEOUT_S=${FEDAVG_TIMEOUT_S:-1200}

# Per way, set by the prepare_* below: the trainer specs the aggregator gets, its extra arguments,
# and the trainers' PIDs by trainer ID.
AGG_TRAINERS=() AGG_ARGS=() WAY_TRAINERS=()
JOB_ARGS=(--rounds "$ROUNDS" --model-mib "$MODEL_MIB")

# Bytes gateway A's external port has sent and received: what crossed between the parties.
crossed_bytes() { lab_json a "sum(p['rx_bytes'] + p['tx_bytes'] for p in r['ports'] if p['name'] == 'external')" stats; }

trainer_ready() { grep -q "^trainer $1 ready" "$WORK/$2.trainer$1.log"; }

prepare_grpc-portmap() {
    local k port
    for k in "${TRAINERS[@]}"; do
        port=$((50060 + k))
        # One import on A and one export on B per trainer; the export only for party alpha.
        lab_ctl a map add import --cluster fedavg --proto tcp --port "$port" --peer beta --peer-port $((15060 + k)) >/dev/null || return
        lab_ctl b map add export --cluster fedavg --proto tcp --port $((15060 + k)) --node "$B_NODE_IP:$port" \
            --allow-party alpha >/dev/null || return
        start "grpc-portmap.trainer$k" "$NS_B_NODE" $PY "$FEDAVG" trainer --id "$k" --transport grpc-portmap \
            --listen "$B_NODE_IP:$port"
        wait_for "trainer $k to serve on $B_NODE_IP:$port" "$LAST_PID" trainer_ready "$k" grpc-portmap || return
        WAY_TRAINERS[k]=$LAST_PID
        AGG_TRAINERS+=(--trainer "$k=$A_IN_IP:$port")
    done
}

prepare_grpc-pid() {
    local k port pid
    for k in "${TRAINERS[@]}"; do
        port=$((50070 + k)) pid=2.11.$k
        start "grpc-pid.trainer$k" "$NS_B_NODE" $PY "$FEDAVG" trainer --id "$k" --transport grpc-pid --listen "127.0.0.1:$port"
        wait_for "trainer $k to serve on 127.0.0.1:$port" "$LAST_PID" trainer_ready "$k" grpc-pid || return
        WAY_TRAINERS[k]=$LAST_PID
        # The sidecar on node b hands process ID 2.11.K to the trainer's local port ...
        start "grpc-pid.expose$k" "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" --bind "$B_NODE_IP" \
            expose --pid "$pid" --to "127.0.0.1:$port"
        wait_for "gateway A to learn $pid" "$LAST_PID" lab_ctl a dir show "$pid" || return
        # ... and the one on node a connects a local port to it, as process 1.11.K.
        start "grpc-pid.forward$k" "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" --bind "$A_NODE_IP" \
            forward --listen "127.0.0.1:$((60070 + k))" --to "$pid" --pid "1.11.$k"
        wait_for "the forward to $pid to listen" "$LAST_PID" port_open "$NS_A_NODE" "127.0.0.1:$((60070 + k))" || return
        AGG_TRAINERS+=(--trainer "$k=127.0.0.1:$((60070 + k))")
    done
}

prepare_fedgate() {
    local k pid
    for k in "${TRAINERS[@]}"; do
        pid=2.10.$k
        start "fedgate.trainer$k" "$NS_B_NODE" env PYTHONPATH="$PYMOD_DIR" $PY "$FEDAVG" trainer --id "$k" \
            --transport fedgate --gateway "$B_IN_IP" --pid "$pid"
        wait_for "trainer $k to listen as $pid" "$LAST_PID" trainer_ready "$k" fedgate || return
        WAY_TRAINERS[k]=$LAST_PID
        wait_for "gateway A to learn $pid" "$LAST_PID" lab_ctl a dir show "$pid" || return
        AGG_TRAINERS+=(--trainer "$k=$pid")
    done
    AGG_ARGS=(--gateway "$A_IN_IP" --pid 1.10.1)
}

# run_way WAY — trainers (and sidecars) up, the aggregator in the foreground, then everything down.
# Fails (without stopping the other ways) when any part of it does.
run_way() {
    local way=$1 rc=0 p k before after agg
    AGG_TRAINERS=() AGG_ARGS=() WAY_TRAINERS=()
    say "$way"
    before=$(crossed_bytes) || before=
    "prepare_$way" || rc=$?
    if ((rc == 0)); then
        # In the background, so that a signal to this script is handled at once (bash runs traps
        # only between foreground commands); its log is shown as it grows.
        start "$way.aggregator" "$NS_A_NODE" env ${PYMOD_DIR:+PYTHONPATH="$PYMOD_DIR"} timeout "$AGG_TIMEOUT_S" \
            $PY "$FEDAVG" aggregator --transport "$way" "${AGG_TRAINERS[@]}" "${AGG_ARGS[@]}" "${JOB_ARGS[@]}"
        agg=$LAST_PID
        tail -s 0.2 -n +1 -f --pid="$agg" "$WORK/$way.aggregator.log" &
        PIDS+=("$!")
        wait "$agg" || rc=$?
        wait "$!" || true
    fi
    # The trainers leave by themselves, exit 0, after the aggregator's last message; sidecars are stopped.
    for k in "${!WAY_TRAINERS[@]}"; do
        p=${WAY_TRAINERS[$k]}
        if ((rc == 0)); then
            wait_for "trainer $k to exit" "$p" bash -c "! kill -0 $p" || rc=1
            wait "$p" || { echo "run.sh: trainer $k exited with status $?" >&2; rc=1; }
        fi
        grep -q "^trainer $k done after $ROUNDS rounds" "$WORK/$way.trainer$k.log" 2>/dev/null || rc=1
    done
    stop_pids
    after=$(crossed_bytes) || after=
    [[ -z $before || -z $after ]] || echo "$((after - before))" >"$WORK/$way.crossed"
    if ((rc != 0)); then
        echo "run.sh: $way failed; its other logs:" >&2
        for p in "$WORK/$way".*.log; do
            [[ $p == *.aggregator.log ]] && continue
            echo "--- ${p##*/}" >&2
            tail -n 20 "$p" >&2
        done
    fi
    return "$rc"
}

say "the lab: gateways A (alpha) and B (beta), prefix $LAB_PREFIX"
lab_up

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
declare -A SUMS=()
failed=0
for w in "${WAYS[@]}"; do
    run_way "$w" || failed=$((failed + 1))
done

say "summary: ${#WAYS[@]} way(s), $ROUNDS rounds, $MODEL_MIB MiB model"
printf '%-14s %-7s %-10s %-10s %-8s %s\n' way rounds "MiB moved" "MiB via A" seconds "final model sha256"
for w in "${WAYS[@]}"; do
    line=$(grep '^final model sha256 ' "$WORK/$w.aggregator.log" 2>/dev/null || true)
    # final model sha256 HEX rounds R bytes B seconds S
    read -r _ _ _ sum _ rounds _ bytes _ seconds <<<"$line" || true
    if [[ -n $line && $rounds == "$ROUNDS" ]]; then
        SUMS[$w]=$sum
        crossed=$(cat "$WORK/$w.crossed" 2>/dev/null || echo 0)
        printf '%-14s %-7s %-10s %-10s %-8s %s\n' "$w" "$rounds" "$(mib "$bytes")" "$(mib "$crossed")" "$seconds" "$sum"
    else
        printf '%-14s %s\n' "$w" "FAILED (see above)"
    fi
done
distinct=$(printf '%s\n' "${SUMS[@]}" | sort -u | grep -c . || true)
if ((failed == 0 && ${#WAYS[@]} == 1)); then
    echo "checksums: one way run, nothing to compare"
elif ((failed == 0 && distinct == 1)); then
    echo "checksums: all ${#WAYS[@]} identical"
elif ((distinct > 1)); then
    echo "checksums: DIFFERENT ($distinct distinct values)"
    failed=$((failed + 1))
else
    echo "checksums: $failed way(s) failed"
fi
((failed == 0))
