# tools/lab.sh — sourced by the demo and the integration tests: brings the two-party topology up,
# starts both gateways in it, waits for them, and tears everything down again (also on failure).
# Callers set LAB_PREFIX and LAB_BUILD (the CMake build dir) before calling lab_up.

LAB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LAB_PREFIX=${LAB_PREFIX:-fg}
LAB_BUILD=${LAB_BUILD:-$LAB_ROOT/build}
LAB_TIMEOUT_S=${LAB_TIMEOUT_S:-60}

lab_topo() { "$LAB_ROOT/tools/topo.sh" --prefix "$LAB_PREFIX" "$@"; }

# Polls a command until it succeeds or LAB_TIMEOUT_S passes: waiting on a condition, not a clock.
lab_wait() { # lab_wait WHAT CMD...
    local what=$1 deadline=$((SECONDS + LAB_TIMEOUT_S))
    shift
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "lab: timed out after ${LAB_TIMEOUT_S}s waiting for $what" >&2
            return 1
        fi
        sleep 0.1
    done
}

lab_ctl() { # lab_ctl a|b ARGS...  — fedgatectl against gateway A or B
    local sock
    [[ $1 == a ]] && sock=$A_SOCK || sock=$B_SOCK
    shift
    "$LAB_BUILD/tools/fedgatectl" --socket "$sock" "$@"
}

lab_gateway_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

lab_up() {
    lab_topo up >/dev/null
    eval "$(lab_topo env)"
    LAB_LOGS=$(dirname "$A_CONF")
    ip netns exec "$NS_A_GW" "$LAB_BUILD/controlplane/fedgated" --config "$A_CONF" >"$LAB_LOGS/a.log" 2>&1 &
    LAB_PID_A=$!
    ip netns exec "$NS_B_GW" "$LAB_BUILD/controlplane/fedgated" --config "$B_CONF" >"$LAB_LOGS/b.log" 2>&1 &
    LAB_PID_B=$!
    local g
    for g in a b; do
        if ! lab_wait "gateway $g to answer on its socket" lab_ctl "$g" status; then
            echo "lab: gateway $g did not come up; its log:" >&2
            cat "$LAB_LOGS/$g.log" >&2
            return 1
        fi
    done
}

# Stops the gateways with SIGTERM (they must exit 0), then removes the topology.
# Prints the gateways' exit codes as LAB_RC_A / LAB_RC_B.
lab_down() {
    local pid
    LAB_RC_A=none LAB_RC_B=none
    for pid in ${LAB_PID_A:-} ${LAB_PID_B:-}; do kill -TERM "$pid" 2>/dev/null || true; done
    if [[ -n ${LAB_PID_A:-} ]]; then wait "$LAB_PID_A" 2>/dev/null && LAB_RC_A=0 || LAB_RC_A=$?; fi
    if [[ -n ${LAB_PID_B:-} ]]; then wait "$LAB_PID_B" 2>/dev/null && LAB_RC_B=0 || LAB_RC_B=$?; fi
    LAB_PID_A= LAB_PID_B=
    lab_topo down >/dev/null 2>&1 || true
    # The EAL runtime directories, named by --file-prefix in the topology configs.
    rm -rf "/var/run/dpdk/$LAB_PREFIX-a" "/var/run/dpdk/$LAB_PREFIX-b"
}
