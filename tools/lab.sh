# shellcheck shell=bash
# tools/lab.sh — sourced by the demo and the integration tests: brings the two-party topology up,
# starts both gateways in it, waits for them, and tears everything down again (also on failure).
# Callers set LAB_PREFIX and LAB_BUILD (the CMake build dir) before calling lab_up.
# LAB_PORTS=af_xdp puts net_af_xdp ports on the gateways instead of net_af_packet.
# LAB_PARTIES=3 builds the three-party variant instead (tools/topo.sh --help): a third gateway C
# (party gamma), all three joined by a bridge; lab_up then starts all three, and lab_start,
# lab_stop and lab_ctl take c as well as a and b.

LAB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LAB_PREFIX=${LAB_PREFIX:-fg}
LAB_BUILD=${LAB_BUILD:-$LAB_ROOT/build}
LAB_TIMEOUT_S=${LAB_TIMEOUT_S:-60}
LAB_PARTIES=${LAB_PARTIES:-2}
# The gateways' port kind: af_packet or af_xdp (tools/topo.sh --ports).
LAB_PORTS=${LAB_PORTS:-af_packet}

# Always passes --parties and --ports, so that FEDGATE_TOPO_PARTIES or FEDGATE_TOPO_PORTS in the
# caller's environment cannot change the variant behind LAB_PARTIES' or LAB_PORTS' back.
lab_topo() { "$LAB_ROOT/tools/topo.sh" --prefix "$LAB_PREFIX" --parties "$LAB_PARTIES" --ports "$LAB_PORTS" "$@"; }

# Exits 77 (a ctest skip), saying why, when LAB_PORTS=af_xdp and this kernel cannot give XDP
# sockets; a test calls it before lab_up.
lab_need_port_kind() {
    [[ $LAB_PORTS == af_xdp ]] || return 0
    if ! python3 -c 'import socket; socket.socket(44, socket.SOCK_RAW, 0).close()' 2>/dev/null; then
        echo "SKIP: af_xdp ports need XDP sockets, and this kernel refuses them (CONFIG_XDP_SOCKETS off, or no CAP_NET_RAW)"
        exit 77
    fi
}

# The gateways of the variant: a b, or a b c.
lab_gateways() { if [[ $LAB_PARTIES == 3 ]]; then echo a b c; else echo a b; fi; }

# Sets LAB_G_NS, LAB_G_CONF, LAB_G_SOCK for gateway a, b or c; fails (naming the problem) for
# anything else, or for c when the topology has only two parties.
# shellcheck disable=SC2153  # NS_*, *_CONF, *_SOCK come from eval "$(lab_topo env)" in lab_up
lab_gw() {
    case ${1:-} in
        a) LAB_G_NS=$NS_A_GW LAB_G_CONF=$A_CONF LAB_G_SOCK=$A_SOCK ;;
        b) LAB_G_NS=$NS_B_GW LAB_G_CONF=$B_CONF LAB_G_SOCK=$B_SOCK ;;
        c)
            if [[ $LAB_PARTIES != 3 || -z ${C_CONF:-} ]]; then
                echo "lab: there is no gateway c in a $LAB_PARTIES-party topology (set LAB_PARTIES=3)" >&2
                return 2
            fi
            LAB_G_NS=$NS_C_GW LAB_G_CONF=$C_CONF LAB_G_SOCK=$C_SOCK ;;
        *) echo "lab: unknown gateway '${1:-}' (want a, b or c)" >&2; return 2 ;;
    esac
}

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

# Test helpers: lab_check records a failure (in LAB_FAILURES) instead of stopping the script.
LAB_FAILURES=0
lab_check() { # lab_check DESCRIPTION CMD...
    local what=$1
    shift
    if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; LAB_FAILURES=$((LAB_FAILURES + 1)); fi
}
lab_eq() { [[ $1 == "$2" ]] || { echo "     expected '$2', got '$1'" >&2; return 1; }; }
lab_json() { # lab_json a|b|c PY-EXPR ARGS... — a Python expression over fedgatectl ARGS --json (as r)
    local g=$1 expr=$2
    shift 2
    lab_ctl "$g" "$@" --json | python3 -c "import json,sys; r=json.load(sys.stdin); print($expr)"
}

lab_ctl() { # lab_ctl a|b|c ARGS...  — fedgatectl against gateway A, B or C
    lab_gw "$1" || return
    shift
    "$LAB_BUILD/tools/fedgatectl" --socket "$LAB_G_SOCK" "$@"
}

lab_gateway_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

lab_up() {
    local g
    lab_topo up >/dev/null
    # A two-party run must not see a previous three-party run's variables.
    unset TOPO_PARTIES NS_C_NODE NS_C_GW NS_JOIN C_NODE_IP C_IN_IP C_EXT_IP \
          C_NODE_IF C_IN_IF C_EXT_IF C_CONF C_SOCK
    eval "$(lab_topo env)"
    LAB_LOGS=$(dirname "$A_CONF")
    # A caller may adjust the configs before the gateways start.
    if declare -F lab_edit_configs >/dev/null; then lab_edit_configs; fi
    for g in $(lab_gateways); do
        lab_start "$g" || return
    done
}

lab_start() { # lab_start a|b|c — starts one gateway and waits until it answers
    local g=$1
    lab_gw "$g" || return
    ip netns exec "$LAB_G_NS" "$LAB_BUILD/controlplane/fedgated" --config "$LAB_G_CONF" >>"$LAB_LOGS/$g.log" 2>&1 &
    case $g in
        a) LAB_PID_A=$! ;;
        b) LAB_PID_B=$! ;;
        c) LAB_PID_C=$! ;;
    esac
    if ! lab_wait "gateway $g to answer on its socket" lab_ctl "$g" status; then
        echo "lab: gateway $g did not come up; its log:" >&2
        cat "$LAB_LOGS/$g.log" >&2
        return 1
    fi
}

lab_stop() { # lab_stop a|b|c — SIGTERM, wait; sets LAB_RC to its exit code
    local pid
    case $1 in
        a) pid=${LAB_PID_A:-} ;;
        b) pid=${LAB_PID_B:-} ;;
        c) pid=${LAB_PID_C:-} ;;
        *) echo "lab: unknown gateway '$1' (want a, b or c)" >&2; return 2 ;;
    esac
    LAB_RC=none
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null && LAB_RC=0 || LAB_RC=$?
    case $1 in
        a) LAB_PID_A= ;;
        b) LAB_PID_B= ;;
        c) LAB_PID_C= ;;
    esac
}

# Stops the gateways with SIGTERM (they must exit 0), then removes the topology.
# Prints the gateways' exit codes as LAB_RC_A / LAB_RC_B (/ LAB_RC_C; "none" if C never ran).
# shellcheck disable=SC2034  # LAB_RC_* are read by the callers
lab_down() {
    lab_stop a
    LAB_RC_A=$LAB_RC
    lab_stop b
    LAB_RC_B=$LAB_RC
    lab_stop c
    LAB_RC_C=$LAB_RC
    lab_topo down >/dev/null 2>&1 || true
    # The EAL runtime directories, named by --file-prefix in the topology configs.
    rm -rf "/var/run/dpdk/$LAB_PREFIX-a" "/var/run/dpdk/$LAB_PREFIX-b" "/var/run/dpdk/$LAB_PREFIX-c"
}
