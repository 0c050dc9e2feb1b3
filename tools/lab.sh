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
    # A caller may adjust the configs before the gateways start.
    if declare -F lab_edit_configs >/dev/null; then lab_edit_configs; fi
    lab_start a && lab_start b
}

lab_start() { # lab_start a|b — starts one gateway and waits until it answers
    local g=$1 ns conf
    [[ $g == a ]] && { ns=$NS_A_GW; conf=$A_CONF; } || { ns=$NS_B_GW; conf=$B_CONF; }
    ip netns exec "$ns" "$LAB_BUILD/controlplane/fedgated" --config "$conf" >>"$LAB_LOGS/$g.log" 2>&1 &
    if [[ $g == a ]]; then LAB_PID_A=$!; else LAB_PID_B=$!; fi
    if ! lab_wait "gateway $g to answer on its socket" lab_ctl "$g" status; then
        echo "lab: gateway $g did not come up; its log:" >&2
        cat "$LAB_LOGS/$g.log" >&2
        return 1
    fi
}

lab_stop() { # lab_stop a|b — SIGTERM, wait; sets LAB_RC to its exit code
    local pid
    [[ $1 == a ]] && pid=${LAB_PID_A:-} || pid=${LAB_PID_B:-}
    LAB_RC=none
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null && LAB_RC=0 || LAB_RC=$?
    if [[ $1 == a ]]; then LAB_PID_A=; else LAB_PID_B=; fi
}

# Stops the gateways with SIGTERM (they must exit 0), then removes the topology.
# Prints the gateways' exit codes as LAB_RC_A / LAB_RC_B.
lab_down() {
    lab_stop a
    LAB_RC_A=$LAB_RC
    lab_stop b
    LAB_RC_B=$LAB_RC
    lab_topo down >/dev/null 2>&1 || true
    # The EAL runtime directories, named by --file-prefix in the topology configs.
    rm -rf "/var/run/dpdk/$LAB_PREFIX-a" "/var/run/dpdk/$LAB_PREFIX-b"
}
