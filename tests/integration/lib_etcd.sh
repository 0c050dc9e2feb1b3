# shellcheck shell=bash
# tests/integration/lib_etcd.sh — sourced by integration tests: a three-member etcd cluster in
# network namespaces, on a management network the test's own namespaces can join.
#
#  ns P-etcd1             ns P-etcd2             ns P-etcd3
#  P6e1 198.18.250.11     P6e2 198.18.250.12     P6e3 198.18.250.13      (P6 = ${PREFIX:0:6})
#        |                      |                      |
#  ns P-store: bridge P6sbr 198.18.250.1/24, ports P6s1 P6s2 P6s3, and P6aX for each
#  namespace joined with etcd_attach NS 198.18.250.X (its end there is P6mX)
#
# Clients on port 2379, peers on 2380. No namespace has a route out of 198.18.250.0/24.
#
#   etcd_up PREFIX         builds the network, starts the three members, waits until all are
#                          healthy; sets ETCD_ENDPOINTS (exported) and the array ETCD_URLS
#   etcd_attach NS IP      joins the existing namespace NS to the management network as IP/24
#   etcd_kill N            SIGKILLs member N (1..3) and waits until it is gone
#   etcd_start N           starts member N again on its data dir (it rejoins the cluster)
#   etcd_wait_healthy [N…] waits until `etcdctl endpoint health` passes on each member (all three
#                          by default); fails at once if one of them is not running
#   etcd_ctl ARGS…         etcdctl (v3 API) in the store namespace against all three members
#   etcd_down              kills the members, deletes the namespaces (and so every veth and the
#                          bridge) and the work dir; idempotent, safe in an EXIT trap at any point
#
# ETCD_MEMBERS=1 (read by etcd_up; default 3) starts member 1 alone, a one-member cluster: what a
# benchmark uses to see the gateway's side when the store does not share its CPUs three times.
# ETCD_MAX_TXN_OPS=N (read when a member starts; default: etcd's own, 128) is the members'
# --max-txn-ops, the most operations one transaction may carry.
#
# The members run with the default timing (heartbeat 100 ms, election timeout 1 s), a 64 MiB
# backend quota and a snapshot every 1000 entries, each in a clean environment (no ETCD_* of the
# caller's is read as a flag). The member pids live in the calling shell: call etcd_up, etcd_start
# and etcd_kill there, not in a subshell or a command substitution.
# ETCD_TIMEOUT_S (default 120) bounds every wait. The work dir (ETCD_WORK) holds each member's
# data dir (etcdN.data) and log (etcdN.log); a failed wait prints the end of the logs.

ETCD_TIMEOUT_S=${ETCD_TIMEOUT_S:-120}
ETCD_NET=198.18.250
ETCD_STORE_IP=$ETCD_NET.1
ETCD_IPS=("" "$ETCD_NET.11" "$ETCD_NET.12" "$ETCD_NET.13")  # index = member number
ETCD_URLS=()
ETCD_PIDS=("" "" "" "")
ETCD_PREFIX='' ETCD_WORK='' ETCD_NS_STORE=''
ETCD_N=3  # the members of the cluster etcd_up started (ETCD_MEMBERS)

_etcd_note() { echo "lib_etcd: $*" >&2; }

# _etcd_names PREFIX: sets the names that follow from the prefix.
_etcd_names() {
    ETCD_PREFIX=$1
    ETCD_P6=${1:0:6}
    ETCD_NS_STORE=$1-store
    ETCD_BR=${ETCD_P6}sbr
    ETCD_NS_MEMBERS=("" "$1-etcd1" "$1-etcd2" "$1-etcd3")
}

_etcd_ns_exists() { [[ -e /run/netns/$1 ]]; }

_etcd_member() { # _etcd_member N: fails unless the cluster was set up and has a member N (1..ETCD_N)
    [[ ${1:-} =~ ^[123]$ ]] || { _etcd_note "no member '${1:-}' (want 1, 2 or 3)"; return 2; }
    [[ -n $ETCD_PREFIX && -n $ETCD_WORK ]] || { _etcd_note "etcd_up has not run"; return 2; }
    (($1 <= ETCD_N)) || { _etcd_note "no member $1 in a cluster of $ETCD_N"; return 2; }
}

# _etcd_ctl_at URLS ARGS...: etcdctl from the store namespace against URLS (comma-separated).
# Only ETCDCTL_API from the environment: no ETCDCTL_* of the caller's reaches it.
_etcd_ctl_at() {
    local urls=$1
    shift
    ip netns exec "$ETCD_NS_STORE" env -i PATH="$PATH" ETCDCTL_API=3 \
        etcdctl --endpoints "$urls" "$@"
}

etcd_ctl() { # etcd_ctl ARGS... — etcdctl against all three members
    [[ -n $ETCD_PREFIX ]] || { _etcd_note "etcd_up has not run"; return 2; }
    _etcd_ctl_at "$ETCD_ENDPOINTS" "$@"
}

etcd_processes() { # etcd_processes PARTY — how many processes PARTY's directory holds in the store
    # Read from its segments here, independently of fedgated (README: a segment per write, "FGD1"
    # and 55-byte entries; a process's newest entry wins by mod revision; -1: unreadable).
    etcd_ctl get --prefix "/fedgate/$1/processes/" -w json | python3 -c '
import base64, json, sys
newest = {}
for kv in sorted(json.load(sys.stdin).get("kvs", []), key=lambda kv: int(kv["mod_revision"])):
    v = base64.b64decode(kv["value"])
    if v[:1] == b"{":  # the earlier layout: a process per key
        newest[int(json.loads(v)["record"][:16], 16)] = True
        continue
    assert v[:4] == b"FGD1" and (len(v) - 4) % 55 == 0, base64.b64decode(kv["key"])
    for at in range(4, len(v), 55):
        newest[int.from_bytes(v[at + 1:at + 9], "big")] = v[at] == 0
print(sum(newest.values()))' 2>/dev/null || echo -1
}

# _etcd_wait WHAT CMD...: polls CMD every 0.2 s until it succeeds or ETCD_TIMEOUT_S passes.
_etcd_wait() {
    local what=$1 deadline=$((SECONDS + ETCD_TIMEOUT_S))
    shift
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            _etcd_note "timed out after ${ETCD_TIMEOUT_S}s waiting for $what"
            return 1
        fi
        sleep 0.2
    done
}

_etcd_healthy() { # _etcd_healthy N: member N answers a quorum read
    _etcd_ctl_at "${ETCD_URLS[$1 - 1]}" --dial-timeout=2s --command-timeout=3s endpoint health
}

_etcd_logs_tail() {
    local n f
    for ((n = 1; n <= ETCD_N; n++)); do
        f=$ETCD_WORK/etcd$n.log
        [[ -f $f ]] || continue
        echo "--- last lines of $f" >&2
        tail -n 15 "$f" >&2
    done
}

_etcd_alive() { [[ -n ${ETCD_PIDS[$1]} ]] && kill -0 "${ETCD_PIDS[$1]}" 2>/dev/null; }

# etcd_wait_healthy [N...] — every member by default. Fails at once when a member's process has
# exited (or was never started), and after ETCD_TIMEOUT_S otherwise; prints the end of the logs.
etcd_wait_healthy() {
    local n members=("$@") deadline=$((SECONDS + ETCD_TIMEOUT_S))
    ((${#members[@]})) || mapfile -t members < <(seq 1 "$ETCD_N")
    for n in "${members[@]}"; do
        _etcd_member "$n" || return
        until _etcd_healthy "$n" >/dev/null 2>&1; do
            if ! _etcd_alive "$n"; then
                _etcd_note "member $n is not running"
                _etcd_logs_tail
                return 1
            fi
            if ((SECONDS >= deadline)); then
                _etcd_note "timed out after ${ETCD_TIMEOUT_S}s waiting for member $n to be healthy"
                _etcd_logs_tail
                return 1
            fi
            sleep 0.2
        done
    done
}

etcd_start() { # etcd_start N — starts member N (again) on its data dir
    _etcd_member "${1:-}" || return
    local n=$1 ip=${ETCD_IPS[$1]} data=$ETCD_WORK/etcd$1.data log=$ETCD_WORK/etcd$1.log
    local state=new cluster=
    if _etcd_alive "$n"; then
        _etcd_note "member $n is already running (pid ${ETCD_PIDS[$n]})"
        return 1
    fi
    # A data dir that holds the member's state makes etcd ignore the --initial-* flags and rejoin
    # with what it stored; "existing" says the same for the record.
    [[ ! -d $data/member ]] || state=existing
    local m
    for ((m = 1; m <= ETCD_N; m++)); do cluster+=${cluster:+,}etcd$m=http://${ETCD_IPS[$m]}:2380; done
    echo "=== lib_etcd: starting member $n ($state) at $(date '+%F %T')" >>"$log"
    # `ip netns exec` and `env` exec their program: $! is etcd's own pid. A clean environment, so
    # that no ETCD_* variable (ETCD_ENDPOINTS among them) is read as a flag.
    ip netns exec "${ETCD_NS_MEMBERS[$n]}" env -i PATH="$PATH" \
        etcd --name "etcd$n" --data-dir "$data" \
        --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
        --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
        --initial-cluster "$cluster" --initial-cluster-token "$ETCD_PREFIX-etcd" \
        --initial-cluster-state "$state" \
        --heartbeat-interval 100 --election-timeout 1000 \
        --quota-backend-bytes $((64 * 1024 * 1024)) --snapshot-count 1000 \
        --max-snapshots 2 --max-wals 2 ${ETCD_MAX_TXN_OPS:+--max-txn-ops "$ETCD_MAX_TXN_OPS"} \
        --logger zap --log-outputs stderr >>"$log" 2>&1 </dev/null &
    ETCD_PIDS[n]=$!
}

etcd_kill() { # etcd_kill N — SIGKILLs member N and waits until it is gone
    _etcd_member "${1:-}" || return
    local n=$1 pid=${ETCD_PIDS[$1]} deadline
    if [[ -z $pid ]]; then
        _etcd_note "member $n is not running"
        return 1
    fi
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true  # reaps it, and keeps bash from reporting "Killed"
    deadline=$((SECONDS + ETCD_TIMEOUT_S))
    while kill -0 "$pid" 2>/dev/null; do  # (not our child, if started from a subshell)
        ((SECONDS < deadline)) || { _etcd_note "member $n (pid $pid) survives SIGKILL"; return 1; }
        sleep 0.1
    done
    ETCD_PIDS[n]=
}

_etcd_link_up() { # _etcd_link_up NS IF: waits until IF in NS is operationally up
    local st
    st=$(ip -n "$1" -o link show dev "$2" 2>/dev/null) || return 1
    [[ $st == *"state UP"* ]]
}

_etcd_ns_add() {
    ip netns add "$1"
    if [[ -d /proc/sys/net/ipv6 ]]; then
        ip netns exec "$1" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1 || true
    fi
    ip -n "$1" link set lo up
}

etcd_up() { # etcd_up PREFIX
    local prefix=${1:?usage: etcd_up PREFIX} n p
    [[ $prefix =~ ^[A-Za-z0-9][A-Za-z0-9_-]*$ ]] || { _etcd_note "bad prefix '$prefix'"; return 2; }
    [[ $(id -u) -eq 0 ]] || { _etcd_note "needs root (network namespaces)"; return 2; }
    for p in ip etcd etcdctl sysctl; do
        command -v "$p" >/dev/null || { _etcd_note "$p is missing"; return 2; }
    done
    [[ -z $ETCD_PREFIX ]] || etcd_down
    _etcd_names "$prefix"
    etcd_down  # what a crashed run with this prefix may have left (namespaces)
    _etcd_names "$prefix"
    ETCD_WORK=$(mktemp -d "${TMPDIR:-/tmp}/lib_etcd.$prefix.XXXXXX") || return
    ETCD_PIDS=("" "" "" "")
    ETCD_N=${ETCD_MEMBERS:-3}
    [[ $ETCD_N == 1 || $ETCD_N == 3 ]] || { _etcd_note "ETCD_MEMBERS=$ETCD_N: want 1 or 3"; return 2; }
    ETCD_URLS=()
    for ((n = 1; n <= ETCD_N; n++)); do ETCD_URLS+=("http://${ETCD_IPS[$n]}:2379"); done
    ETCD_ENDPOINTS=$(IFS=,; echo "${ETCD_URLS[*]}")
    export ETCD_ENDPOINTS

    # The management network: a bridge in the store namespace (no STP, so a port forwards at once).
    _etcd_ns_add "$ETCD_NS_STORE" || return
    ip netns exec "$ETCD_NS_STORE" sysctl -q -w net.ipv4.ip_forward=0 || return
    ip -n "$ETCD_NS_STORE" link add "$ETCD_BR" type bridge stp_state 0 forward_delay 0 || return
    ip -n "$ETCD_NS_STORE" addr add "$ETCD_STORE_IP/24" dev "$ETCD_BR" || return
    ip -n "$ETCD_NS_STORE" link set "$ETCD_BR" up || return
    for ((n = 1; n <= ETCD_N; n++)); do
        _etcd_ns_add "${ETCD_NS_MEMBERS[$n]}" || return
        ip -n "$ETCD_NS_STORE" link add "${ETCD_P6}s$n" type veth \
            peer name "${ETCD_P6}e$n" netns "${ETCD_NS_MEMBERS[$n]}" || return
        ip -n "$ETCD_NS_STORE" link set "${ETCD_P6}s$n" master "$ETCD_BR" up || return
        ip -n "${ETCD_NS_MEMBERS[$n]}" addr add "${ETCD_IPS[$n]}/24" dev "${ETCD_P6}e$n" || return
        ip -n "${ETCD_NS_MEMBERS[$n]}" link set "${ETCD_P6}e$n" up || return
    done
    for ((n = 1; n <= ETCD_N; n++)); do
        _etcd_wait "link ${ETCD_P6}e$n up" _etcd_link_up "${ETCD_NS_MEMBERS[$n]}" "${ETCD_P6}e$n" || return
    done
    for ((n = 1; n <= ETCD_N; n++)); do
        etcd_start "$n" || return
    done
    etcd_wait_healthy
}

etcd_attach() { # etcd_attach NS IP — joins namespace NS to the management network as IP/24
    local ns=${1:?usage: etcd_attach NS IP} ip=${2:?usage: etcd_attach NS IP} x
    if [[ -z $ETCD_PREFIX ]] || ! _etcd_ns_exists "$ETCD_NS_STORE"; then
        _etcd_note "etcd_up has not run"
        return 2
    fi
    _etcd_ns_exists "$ns" || { _etcd_note "no namespace $ns"; return 2; }
    [[ $ip =~ ^198\.18\.250\.([0-9]{1,3})$ ]] || { _etcd_note "$ip is not in $ETCD_NET.0/24"; return 2; }
    x=${BASH_REMATCH[1]}
    if ((x < 2 || x > 254 || (x >= 11 && x <= 13))); then
        _etcd_note "$ip is taken (.1 is the store, .11-.13 the members) or not a host address"
        return 2
    fi
    ip -n "$ETCD_NS_STORE" link add "${ETCD_P6}a$x" type veth peer name "${ETCD_P6}m$x" netns "$ns" || return
    ip -n "$ETCD_NS_STORE" link set "${ETCD_P6}a$x" master "$ETCD_BR" up || return
    ip -n "$ns" addr add "$ip/24" dev "${ETCD_P6}m$x" || return
    ip -n "$ns" link set "${ETCD_P6}m$x" up || return
    _etcd_wait "link ${ETCD_P6}m$x up in $ns" _etcd_link_up "$ns" "${ETCD_P6}m$x"
}

etcd_down() { # etcd_down — idempotent; never fails
    [[ -n $ETCD_PREFIX ]] || return 0
    local n pid ns name pids=() deadline
    for n in 1 2 3; do
        [[ -z ${ETCD_PIDS[$n]:-} ]] || pids+=("${ETCD_PIDS[$n]}")
    done
    # Also whatever else runs in our own namespaces (a member started by a crashed earlier run).
    for ns in "${ETCD_NS_MEMBERS[@]:1}" "$ETCD_NS_STORE"; do
        if _etcd_ns_exists "$ns"; then
            while read -r pid; do [[ -z $pid ]] || pids+=("$pid"); done < <(ip netns pids "$ns" 2>/dev/null)
        fi
    done
    if ((${#pids[@]})); then
        for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
        for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
        deadline=$((SECONDS + 10))
        for pid in "${pids[@]}"; do
            while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        done
    fi
    ETCD_PIDS=("" "" "" "")
    # Deleting a namespace deletes its links, the far ends of its veths too, but the kernel does
    # that later, in the background: the veths of the store namespace are deleted first, at once,
    # so that a namespace joined with etcd_attach has lost its end when etcd_down returns.
    if _etcd_ns_exists "$ETCD_NS_STORE"; then
        while read -r name _; do
            [[ -z $name ]] || ip -n "$ETCD_NS_STORE" link delete "${name%%@*}" 2>/dev/null || true
        done < <(ip -n "$ETCD_NS_STORE" -br link show type veth 2>/dev/null)
    fi
    for ns in "${ETCD_NS_MEMBERS[@]:1}" "$ETCD_NS_STORE"; do
        if _etcd_ns_exists "$ns"; then
            ip netns delete "$ns" 2>/dev/null || _etcd_note "could not delete namespace $ns"
        fi
    done
    if [[ -n $ETCD_WORK && -d $ETCD_WORK ]]; then
        rm -rf -- "$ETCD_WORK" || _etcd_note "could not remove $ETCD_WORK"
    fi
    ETCD_WORK=
    return 0
}
