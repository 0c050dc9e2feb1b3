#!/usr/bin/env bash
# tools/topo.sh — the fedgate test topology in network namespaces: two parties
# (default) or three (--parties 3).
#
# Builds (up), removes (down), shows (status) and describes (env) the parties'
# private networks joined through their gateway namespaces, each gateway port a
# bare veth end that a DPDK net_af_packet (or, with --ports af_xdp, net_af_xdp) port drives. Two parties' gateways
# are joined by one veth pair; three parties' by a Linux bridge in a namespace
# of its own. See --help.
#
# Only addresses from 198.18.0.0/15 are used; no namespace has a route out.

set -euo pipefail

readonly PROG=${0##*/}
readonly DEFAULT_STATE_ROOT=/run/fedgate-topo

# Fixed addressing of the topology (all inside 198.18.0.0/15).
readonly A_NODE_IP=198.18.1.10 A_IN_IP=198.18.1.1 A_NET_LEN=24
readonly B_NODE_IP=198.18.2.10 B_IN_IP=198.18.2.1 B_NET_LEN=24
readonly C_NODE_IP=198.18.3.10 C_IN_IP=198.18.3.1 C_NET_LEN=24
readonly A_EXT_IP=198.19.0.1 B_EXT_IP=198.19.0.2 C_EXT_IP=198.19.0.3 EXT_NET_LEN=24

usage() {
    cat <<EOF
Usage: $PROG [--prefix P] [--parties 2|3] [--ports af_packet|af_xdp] up|down|status|env
       $PROG --help

Builds the fedgate test topology in network namespaces. Two parties (the
default):

 ns P-a-node          ns P-a-gw                        ns P-b-gw          ns P-b-node
+----------------+   +------------------+        +------------------+   +----------------+
| Pa-node        |   | Pa-in            |        |            Pb-in |   |        Pb-node |
| 198.18.1.10/24 +---+ gw 198.18.1.1/24 |        | gw 198.18.2.1/24 +---+ 198.18.2.10/24 |
| default via    |   |   [gateway A]    |        |   [gateway B]    |   |    default via |
|   198.18.1.1   |   | Pa-ext           |        |           Pb-ext |   |   198.18.2.1   |
+----------------+   | gw 198.19.0.1/24 +--------+ gw 198.19.0.2/24 |   +----------------+
                     +------------------+        +------------------+
 party A private net                 joining network                party B private net
   198.18.1.0/24                      198.19.0.0/24                    198.18.2.0/24

Three parties (--parties 3): party C is built like A and B, and the joining
network becomes a Linux bridge in a namespace of its own, P-join, with one
port facing each gateway's external end (A and B keep their internal sides
and nodes as above):

 ns P-a-gw                     ns P-join                      ns P-b-gw
+------------------+         +----------------------+         +------------------+
|   [gateway A]    |         | bridge Pj-br (no IP) |         |   [gateway B]    |
| Pa-ext           |         |                      |         |           Pb-ext |
| gw 198.19.0.1/24 +---------+ Pj-a           Pj-b  +---------+ gw 198.19.0.2/24 |
+------------------+         |        Pj-c          |         +------------------+
                             +----------+-----------+
                                        |           joining network
                                        |            198.19.0.0/24
                              +---------+--------+
                    ns P-c-gw | gw 198.19.0.3/24 |
                              | Pc-ext           |
                              |   [gateway C]    |
                              | Pc-in            |
                              | gw 198.18.3.1/24 |
                              +---------+--------+
                                        |           party C private net
                              +---------+--------+   198.18.3.0/24
                  ns P-c-node | 198.18.3.10/24   |
                              | Pc-node          |
                              | default via      |
                              |   198.18.3.1     |
                              +------------------+

  Every link is a veth pair. The node ends carry kernel addresses and a
  default route via their gateway. The gateway ends (Pa-in, Pa-ext, Pb-in,
  Pb-ext, Pc-in, Pc-ext) have NO kernel address: the DPDK gateway (fedgated,
  net_af_packet or net_af_xdp on the veth end) owns the "gw ..." addresses and answers
  ARP/ICMP. The bridge and its ports (Pj-a, Pj-b, Pj-c) carry no address
  either; they only switch frames between the gateways. IPv6 is disabled in
  all namespaces; TX checksum offload (and TSO/GSO, and GRO on the gateway
  and bridge ends) is off on every veth end.

Commands:
  up      (re)build the topology (runs 'down' first) and write the gateway
          configs STATE/P/a.toml and STATE/P/b.toml (and STATE/P/c.toml with
          3 parties). Each lists every other gateway as a [[peer]] (party
          alpha=1, beta=2, gamma=3, at its external address) with one fresh
          random key per pair of parties (the a-b key is the same in a.toml
          and b.toml, and so on).
  down    kill processes left in the namespaces, delete the namespaces, any
          stray P-named veth (or bridge) in the root namespace, and STATE/P.
          Removes both variants (2 and 3 parties) whatever --parties says.
          Idempotent.
  status  show links and addresses in each namespace; exit 0 if all
          namespaces of the variant (4, or 7 with 3 parties) exist, 1
          otherwise
  env     print shell assignments for 'eval "\$($PROG env)"':
          TOPO_PREFIX TOPO_STATE NS_A_NODE NS_A_GW NS_B_NODE NS_B_GW
          A_NODE_IP B_NODE_IP A_IN_IP B_IN_IP A_EXT_IP B_EXT_IP
          A_NODE_IF A_IN_IF A_EXT_IF B_NODE_IF B_IN_IF B_EXT_IF
          A_CONF B_CONF A_SOCK B_SOCK
          and, with 3 parties, also:
          TOPO_PARTIES NS_C_NODE NS_C_GW NS_JOIN C_NODE_IP C_IN_IP C_EXT_IP
          C_NODE_IF C_IN_IF C_EXT_IF C_CONF C_SOCK

Options:
  --prefix P      prefix of every namespace and interface name, [a-z0-9]{1,4}
                  (default: \$FEDGATE_TOPO_PREFIX, else "fg"), so that several
                  topologies (a test run and a demo) can coexist
  --parties 2|3   number of parties (default: \$FEDGATE_TOPO_PARTIES, else 2)
  --ports KIND    the DPDK port kind the gateway configs put on the gateway
                  ends: af_packet (default: \$FEDGATE_TOPO_PORTS, else
                  af_packet; net_af_packet, a TPACKET ring) or af_xdp
                  (net_af_xdp: an XDP socket, and an XDP program attached
                  natively to the veth end, which then limits the MTU of its
                  peer to about 3500 bytes; needs a kernel with XDP sockets)
  -h, --help      this text

Environment:
  FEDGATE_TOPO_PREFIX   default prefix
  FEDGATE_TOPO_PARTIES  default number of parties
  FEDGATE_TOPO_PORTS    default port kind (af_packet or af_xdp)
  FEDGATE_TOPO_STATE    state root (absolute); else \$STATE; else $DEFAULT_STATE_ROOT
  FEDGATE_TOPO_WORKERS  data-plane workers of every gateway (default 1); above 1 the EAL
                        gets --lcores with the workers floating over all CPUs
  FEDGATE_TOPO_FLOAT    1: with one worker too, each gateway's data-plane lcore floats over
                        all CPUs (--lcores) instead of the placement below (default 0)

Gateway configs: A (alpha) runs EAL with -l 0,1 (data plane on worker lcore
1), B (beta) and C (gamma) with -l 1 (data plane on the main lcore); file
prefixes P-a, P-b, P-c; sockets STATE/P/a.sock, b.sock, c.sock; state dirs
STATE/P/a-state, b-state, c-state.

Start the gateways with, e.g.:
  eval "\$($PROG --prefix P env)"
  ip netns exec "\$NS_A_GW" fedgated --config "\$A_CONF" &
  ip netns exec "\$NS_B_GW" fedgated --config "\$B_CONF" &
  ip netns exec "\$NS_A_NODE" ping -c1 "\$A_IN_IP"
and with 3 parties ($PROG --prefix P --parties 3 up), also:
  eval "\$($PROG --prefix P --parties 3 env)"
  ip netns exec "\$NS_C_GW" fedgated --config "\$C_CONF" &
Must be run as root (except env and --help).
EOF
}

die() { echo "$PROG: $*" >&2; exit 1; }
bad_usage() {
    echo "$PROG: $*" >&2
    echo "Usage: $PROG [--prefix P] [--parties 2|3] up|down|status|env   (see --help)" >&2
    exit 2
}
note() { echo "$PROG: $*" >&2; }

# ---------------------------------------------------------------- arguments
ORIG_ARGS=("$@")
PREFIX=${FEDGATE_TOPO_PREFIX:-fg}
PARTIES=${FEDGATE_TOPO_PARTIES:-2}
WORKERS=${FEDGATE_TOPO_WORKERS:-1}
[[ $WORKERS =~ ^([1-9]|1[0-6])$ ]] || { echo "topo.sh: FEDGATE_TOPO_WORKERS must be 1..16, not '$WORKERS'" >&2; exit 2; }
FLOAT=${FEDGATE_TOPO_FLOAT:-0}
[[ $FLOAT == 0 || $FLOAT == 1 ]] || { echo "topo.sh: FEDGATE_TOPO_FLOAT must be 0 or 1, not '$FLOAT'" >&2; exit 2; }
PORTS=${FEDGATE_TOPO_PORTS:-af_packet}
CMD=
while (($#)); do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --prefix)
            (($# >= 2)) || bad_usage "--prefix needs a value"
            PREFIX=$2; shift 2 ;;
        --prefix=*) PREFIX=${1#--prefix=}; shift ;;
        --parties)
            (($# >= 2)) || bad_usage "--parties needs a value"
            PARTIES=$2; shift 2 ;;
        --parties=*) PARTIES=${1#--parties=}; shift ;;
        --ports)
            (($# >= 2)) || bad_usage "--ports needs a value"
            PORTS=$2; shift 2 ;;
        --ports=*) PORTS=${1#--ports=}; shift ;;
        -*) bad_usage "unknown option: $1" ;;
        *)
            [[ -z $CMD ]] || bad_usage "one command only (got '$CMD' and '$1')"
            CMD=$1; shift ;;
    esac
done
[[ -n $CMD ]] || bad_usage "no command given"
case $CMD in up|down|status|env) ;; *) bad_usage "unknown command: $CMD" ;; esac

if [[ ! $PREFIX =~ ^[a-z0-9]{1,4}$ ]]; then
    echo "$PROG: invalid prefix '$PREFIX': must match [a-z0-9]{1,4}" \
         "(it is part of every interface name, which must stay <= 15 chars)" >&2
    exit 2
fi
[[ $PARTIES == 2 || $PARTIES == 3 ]] || bad_usage "invalid number of parties '$PARTIES': must be 2 or 3"
[[ $PORTS == af_packet || $PORTS == af_xdp ]] || bad_usage "invalid port kind '$PORTS': must be af_packet or af_xdp"
# DPDK 22.11's af_xdp takes as many queues as the interface has combined channels, and a veth has
# none to offer: one queue, so one worker.
[[ $PORTS != af_xdp || $WORKERS == 1 ]] || { echo "topo.sh: af_xdp ports on veths take one queue: FEDGATE_TOPO_WORKERS must be 1 with --ports af_xdp, not $WORKERS" >&2; exit 2; }

STATE_ROOT=${FEDGATE_TOPO_STATE:-${STATE:-$DEFAULT_STATE_ROOT}}
STATE_ROOT=${STATE_ROOT%/}
[[ $STATE_ROOT == /?* ]] || { echo "$PROG: state root must be an absolute path: '$STATE_ROOT'" >&2; exit 2; }
readonly PREFIX PARTIES PORTS STATE_ROOT
readonly STATE_DIR=$STATE_ROOT/$PREFIX

readonly NS_A_NODE=$PREFIX-a-node NS_A_GW=$PREFIX-a-gw
readonly NS_B_NODE=$PREFIX-b-node NS_B_GW=$PREFIX-b-gw
readonly NS_C_NODE=$PREFIX-c-node NS_C_GW=$PREFIX-c-gw NS_JOIN=$PREFIX-join
readonly A_NODE_IF=${PREFIX}a-node A_IN_IF=${PREFIX}a-in A_EXT_IF=${PREFIX}a-ext
readonly B_NODE_IF=${PREFIX}b-node B_IN_IF=${PREFIX}b-in B_EXT_IF=${PREFIX}b-ext
readonly C_NODE_IF=${PREFIX}c-node C_IN_IF=${PREFIX}c-in C_EXT_IF=${PREFIX}c-ext
# The bridge in NS_JOIN and its ports, each the peer of one gateway's external end.
readonly J_BR_IF=${PREFIX}j-br J_A_IF=${PREFIX}j-a J_B_IF=${PREFIX}j-b J_C_IF=${PREFIX}j-c
readonly A_CONF=$STATE_DIR/a.toml B_CONF=$STATE_DIR/b.toml C_CONF=$STATE_DIR/c.toml
# shellcheck disable=SC2034  # read through ${!v} in cmd_env
readonly A_SOCK=$STATE_DIR/a.sock B_SOCK=$STATE_DIR/b.sock C_SOCK=$STATE_DIR/c.sock

# The namespaces, links and configs of the chosen variant ...
if ((PARTIES == 3)); then
    readonly ALL_NS=("$NS_A_NODE" "$NS_A_GW" "$NS_B_NODE" "$NS_B_GW" "$NS_C_NODE" "$NS_C_GW" "$NS_JOIN")
    readonly ALL_CONF=("$A_CONF" "$B_CONF" "$C_CONF")
else
    readonly ALL_NS=("$NS_A_NODE" "$NS_A_GW" "$NS_B_NODE" "$NS_B_GW")
    readonly ALL_CONF=("$A_CONF" "$B_CONF")
fi
# ... and of both variants, which 'down' always removes.
readonly EVERY_NS=("$NS_A_NODE" "$NS_A_GW" "$NS_B_NODE" "$NS_B_GW" "$NS_C_NODE" "$NS_C_GW" "$NS_JOIN")
readonly EVERY_IF=("$A_NODE_IF" "$A_IN_IF" "$A_EXT_IF" "$B_NODE_IF" "$B_IN_IF" "$B_EXT_IF"
                   "$C_NODE_IF" "$C_IN_IF" "$C_EXT_IF" "$J_A_IF" "$J_B_IF" "$J_C_IF")

need_root() {
    [[ $EUID -eq 0 ]] || die "'$CMD' must be run as root (it manages network namespaces); try: sudo $0 ${ORIG_ARGS[*]}"
}
need_tools() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || die "required tool '$t' not found (Debian: apt-get install -y iproute2 ethtool coreutils)"
    done
}

ns_exists() { [[ -e /run/netns/$1 ]]; }

# Never signal this script, its ancestors (it may have been started inside
# one of the namespaces) or its own children (which then are inside too), and
# skip zombies, which hold no namespace. Pure bash: no fork per PID.
# (Forks are slow on small VMs: the helpers below set globals instead.)
P_PPID="" P_STATE=""
proc_ppid_state() { # PID -> sets P_PPID, P_STATE; fails if gone
    local st f
    { read -r st </proc/"$1"/stat; } 2>/dev/null || return 1
    read -r -a f <<<"${st##*) }"       # fields after "pid (comm) ": state ppid ...
    P_STATE=${f[0]:-?} P_PPID=${f[1]:-0}
}
SELF_PIDS=
self_pids_init() {
    local p=$$
    SELF_PIDS=" "
    while [[ $p =~ ^[0-9]+$ ]] && ((p > 1)); do
        SELF_PIDS+="$p "
        proc_ppid_state "$p" || break
        p=$P_PPID
    done
}
is_ours_or_gone() {
    local p=$1 n
    [[ $SELF_PIDS == *" $p "* ]] && return 0
    proc_ppid_state "$p" || return 0
    [[ $P_STATE == Z ]] && return 0
    for ((n = 0; n < 64 && p > 1; n++)); do
        ((p == $$ || p == BASHPID)) && return 0
        proc_ppid_state "$p" || return 1
        p=$P_PPID
    done
    return 1
}

# PIDs in namespace $1 that are alive and not ours.
ns_pids() {
    local p
    while read -r p; do
        [[ $p =~ ^[0-9]+$ ]] && ! is_ours_or_gone "$p" && echo "$p"
    done < <(ip netns pids "$1" 2>/dev/null || true)
    return 0
}

# ---------------------------------------------------------------- down
# PIDs in all of our namespaces (of either variant) that still exist (other than ours).
all_ns_pids() {
    local ns
    for ns in "${EVERY_NS[@]}"; do
        ns_exists "$ns" && ns_pids "$ns"
    done
    return 0
}

cmd_down() {
    local ns pids p i name deadline
    self_pids_init
    # 1. Ask every process in our namespaces to stop; wait ~5 s; then force.
    mapfile -t pids < <(all_ns_pids)
    if ((${#pids[@]})); then
        note "stopping ${#pids[@]} process(es) left in the $PREFIX namespaces: ${pids[*]}"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        deadline=$((SECONDS + 5))
        while :; do
            mapfile -t pids < <(all_ns_pids)
            ((${#pids[@]} && SECONDS < deadline)) || break
            sleep 0.1
        done
        # Re-scanned: includes anything forked meanwhile.
        for ((i = 0; i < 10 && ${#pids[@]}; i++)); do
            ((i > 0)) || note "force-killing: ${pids[*]}"
            kill -KILL "${pids[@]}" 2>/dev/null || true
            sleep 0.1
            mapfile -t pids < <(all_ns_pids)
        done
        ((${#pids[@]} == 0)) || note "still running in the $PREFIX namespaces: ${pids[*]}"
    fi
    # 2. Delete the namespaces of both variants (their veths and the bridge go with them).
    for ns in "${EVERY_NS[@]}"; do
        if ns_exists "$ns"; then
            ip netns delete "$ns" 2>/dev/null || note "could not delete namespace $ns"
        fi
    done
    # 3. Any stray veth (or bridge) with one of our exact names in the root namespace.
    while read -r name _; do
        name=${name%%@*}
        for p in "${EVERY_IF[@]}"; do
            # (Deleting one end of a veth removes its peer: skip it then.)
            if [[ $name == "$p" ]] && ip link show dev "$name" >/dev/null 2>&1; then
                ip link delete "$name" 2>/dev/null || note "could not delete stray link $name"
            fi
        done
    done < <(ip -br link show type veth 2>/dev/null || true)
    while read -r name _; do
        if [[ $name == "$J_BR_IF" ]]; then
            ip link delete "$name" 2>/dev/null || note "could not delete stray bridge $name"
        fi
    done < <(ip -br link show type bridge 2>/dev/null || true)
    # 4. The state directory of this prefix (only that one).
    if [[ -d $STATE_DIR ]]; then
        rm -rf -- "$STATE_DIR" || note "could not remove $STATE_DIR"
    fi
    rmdir -- "$STATE_ROOT" 2>/dev/null || true
    return 0
}

# ---------------------------------------------------------------- up
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

ns_sysctls() {
    local ns=$1
    if [[ -d /proc/sys/net/ipv6 ]]; then
        nsx "$ns" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
        nsx "$ns" sysctl -q -w net.ipv6.conf.lo.disable_ipv6=1
    fi
}

# Offloads off; tolerate features a veth does not have, but require TX
# checksumming to end up off (af_packet would see partial checksums).
offloads_off() {
    local ns=$1 dev=$2 f state
    shift 2
    for f in "$@"; do
        nsx "$ns" ethtool -K "$dev" "$f" off >/dev/null 2>&1 || true
    done
    state=$(nsx "$ns" ethtool -k "$dev" 2>/dev/null | awk -F': ' '$1 == "tx-checksumming" { print $2 }') || state=
    [[ -n $state ]] || die "cannot read the offload settings of $dev in $ns (ethtool -k)"
    [[ $state == off* ]] || die "TX checksum offload still '$state' on $dev in $ns"
}

veth() { # veth NS1 IF1 NS2 IF2
    ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
}

# port_device N IF: the devargs of gateway port N on veth end IF, of the chosen kind. af_xdp:
# busy_budget=0, because the PMD's preferred busy polling makes a syscall per empty poll, which
# the lcore's idle back-off would pay for on every poll of an idle gateway.
port_device() {
    case $PORTS in
        af_packet) echo "net_af_packet$1,iface=$2,framecnt=4096" ;;
        af_xdp) echo "net_af_xdp$1,iface=$2,busy_budget=0" ;;
    esac
}

# write_conf file party id ns_label core in_if in_addr ext_if ext_addr \
#            peer peer_id peer_addr key [peer peer_id peer_addr key ...]
write_conf() {
    local file=$1 party=$2 id=$3 tag=$4 core=$5 in_if=$6 in_addr=$7 ext_if=$8 ext_addr=$9
    shift 9
    (($# >= 4 && $# % 4 == 0)) || die "write_conf: peers must come as (party id address key) groups"
    local tmp=$file.tmp.$$ lcores mbufs=
    # Several workers: each its own lcore, all of them free to run on any CPU (a 2-CPU machine runs
    # two gateways with two workers each).
    # One worker floating (FEDGATE_TOPO_FLOAT): the same lcores as pinned (A: control on lcore 0,
    # the data plane on lcore 1; B, C: the data plane on the main lcore 1), lcore 1 on any CPU.
    local cpus="0-$(($(nproc) - 1))"
    if ((WORKERS == 1 && FLOAT)); then
        if [[ $core == *,* ]]; then lcores="\"--lcores\", \"0@0,1@($cpus)\""; else lcores="\"--lcores\", \"1@($cpus)\""; fi
    elif ((WORKERS == 1)); then
        lcores="\"-l\", \"$core\""
    else
        lcores="\"--lcores\", \"0@0,(1-$WORKERS)@($cpus)\""
    fi
    local in_dev ext_dev
    in_dev=$(port_device 0 "$in_if") ext_dev=$(port_device 1 "$ext_if")
    # af_xdp fills its fill ring with 2048 mbufs at start: two ports' worth on top of the default
    # 8191 for the packets themselves.
    [[ $PORTS != af_xdp ]] || mbufs="mbufs = $((2 * 2048 + 8191))"
    {
    cat <<EOF
# fedgate gateway config for party $party — written by tools/topo.sh
# topology prefix "$PREFIX", $PORTS ports; start with:
#   ip netns exec $PREFIX-$tag-gw fedgated --config $file
[gateway]
party = "$party"
party_id = $id
socket = "$STATE_DIR/$tag.sock"
state_dir = "$STATE_DIR/$tag-state"

[eal]
args = [$lcores, "--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--file-prefix", "$PREFIX-$tag", "--log-level", "lib.eal:warning"]

[dataplane]
idle = "backoff"
workers = $WORKERS
$mbufs

[[port]]
name = "internal"
role = "internal"
device = "$in_dev"
address = "$in_addr"

[[port]]
name = "external"
role = "external"
device = "$ext_dev"
address = "$ext_addr"
EOF
    while (($#)); do
        cat <<EOF

[[peer]]
party = "$1"
party_id = $2
address = "$3"
key = "$4"
EOF
        shift 4
    done
    } >"$tmp"
    mv -f -- "$tmp" "$file"
}

# wait_carrier NS IF [NS IF ...]: wait (up to ~3 s) until every link is
# operationally up, so that a caller starting the gateways right away does not
# race the kernel's carrier propagation.
wait_carrier() {
    local i j k st pending
    for ((i = 0; i < 30; i++)); do
        pending=
        for ((j = 1; j < $#; j += 2)); do
            k=$((j + 1))
            st=$(ip -n "${!j}" -o link show dev "${!k}" 2>/dev/null) || st=
            [[ $st == *"state UP"* ]] || pending+=" ${!k}"
        done
        [[ -z $pending ]] && return 0
        sleep 0.1
    done
    die "links not operationally up after 3 s:$pending"
}

UP_DONE=0
up_failed() {
    local rc=$?
    if ((UP_DONE == 0)); then
        note "'up' failed (exit $rc); removing the half-built topology"
        trap - EXIT
        set +e
        cmd_down
    fi
    exit "$rc"
}

# A fresh random 256-bit key, as 64 hex digits.
new_key() {
    local k
    k=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    [[ $k =~ ^[0-9a-f]{64}$ ]] || die "could not generate a key"
    echo "$k"
}

# The joining network of three parties: a bridge in NS_JOIN, one port facing
# each gateway's external end. The bridge and its ports carry no address;
# no STP (so ports forward at once), no multicast snooping, no netfilter.
join_bridge_up() {
    local p
    nsx "$NS_JOIN" sysctl -q -w net.ipv4.ip_forward=0
    for p in bridge-nf-call-iptables bridge-nf-call-ip6tables bridge-nf-call-arptables; do
        # Only present (per namespace) when br_netfilter is loaded.
        nsx "$NS_JOIN" sh -c "f=/proc/sys/net/bridge/$p; [ ! -e \$f ] || echo 0 >\$f"
    done
    ip -n "$NS_JOIN" link add "$J_BR_IF" type bridge stp_state 0 forward_delay 0 mcast_snooping 0
    for p in "$J_A_IF" "$J_B_IF" "$J_C_IF"; do
        offloads_off "$NS_JOIN" "$p" tx gro gso tso
        ip -n "$NS_JOIN" link set "$p" master "$J_BR_IF"
    done
    ip -n "$NS_JOIN" link set "$J_BR_IF" up
    for p in "$J_A_IF" "$J_B_IF" "$J_C_IF"; do
        ip -n "$NS_JOIN" link set "$p" up
    done
}

# wait_forwarding NS IF...: wait (up to ~3 s) until every bridge port forwards.
wait_forwarding() {
    local ns=$1 i p st pending
    shift
    for ((i = 0; i < 30; i++)); do
        pending=
        for p in "$@"; do
            st=$(ip -n "$ns" -d -o link show dev "$p" 2>/dev/null) || st=
            [[ $st == *"bridge_slave state forwarding"* ]] || pending+=" $p"
        done
        [[ -z $pending ]] && return 0
        sleep 0.1
    done
    die "bridge ports not forwarding after 3 s:$pending"
}

cmd_up() {
    local ns key key_ab key_ac key_bc
    cmd_down
    trap up_failed EXIT

    for ns in "${ALL_NS[@]}"; do
        ip netns add "$ns"
        ns_sysctls "$ns"
        ip -n "$ns" link set lo up
    done
    # The gateway namespaces must never route in the kernel: the data plane does.
    for ns in "$NS_A_GW" "$NS_B_GW"; do
        nsx "$ns" sysctl -q -w net.ipv4.ip_forward=0
    done
    ((PARTIES == 2)) || nsx "$NS_C_GW" sysctl -q -w net.ipv4.ip_forward=0

    # Veth pairs are created directly inside their namespaces, never in root.
    veth "$NS_A_NODE" "$A_NODE_IF" "$NS_A_GW" "$A_IN_IF"
    veth "$NS_B_NODE" "$B_NODE_IF" "$NS_B_GW" "$B_IN_IF"
    if ((PARTIES == 2)); then
        veth "$NS_A_GW" "$A_EXT_IF" "$NS_B_GW" "$B_EXT_IF"
    else
        veth "$NS_C_NODE" "$C_NODE_IF" "$NS_C_GW" "$C_IN_IF"
        veth "$NS_A_GW" "$A_EXT_IF" "$NS_JOIN" "$J_A_IF"
        veth "$NS_B_GW" "$B_EXT_IF" "$NS_JOIN" "$J_B_IF"
        veth "$NS_C_GW" "$C_EXT_IF" "$NS_JOIN" "$J_C_IF"
    fi

    offloads_off "$NS_A_NODE" "$A_NODE_IF" tx tso gso
    offloads_off "$NS_B_NODE" "$B_NODE_IF" tx tso gso
    offloads_off "$NS_A_GW" "$A_IN_IF" tx gro gso tso
    offloads_off "$NS_A_GW" "$A_EXT_IF" tx gro gso tso
    offloads_off "$NS_B_GW" "$B_IN_IF" tx gro gso tso
    offloads_off "$NS_B_GW" "$B_EXT_IF" tx gro gso tso
    if ((PARTIES == 3)); then
        offloads_off "$NS_C_NODE" "$C_NODE_IF" tx tso gso
        offloads_off "$NS_C_GW" "$C_IN_IF" tx gro gso tso
        offloads_off "$NS_C_GW" "$C_EXT_IF" tx gro gso tso
        join_bridge_up
    fi

    ip -n "$NS_A_NODE" addr add "$A_NODE_IP/$A_NET_LEN" dev "$A_NODE_IF"
    ip -n "$NS_B_NODE" addr add "$B_NODE_IP/$B_NET_LEN" dev "$B_NODE_IF"
    ((PARTIES == 2)) || ip -n "$NS_C_NODE" addr add "$C_NODE_IP/$C_NET_LEN" dev "$C_NODE_IF"

    ip -n "$NS_A_GW" link set "$A_IN_IF" up
    ip -n "$NS_A_GW" link set "$A_EXT_IF" up
    ip -n "$NS_B_GW" link set "$B_IN_IF" up
    ip -n "$NS_B_GW" link set "$B_EXT_IF" up
    ip -n "$NS_A_NODE" link set "$A_NODE_IF" up
    ip -n "$NS_B_NODE" link set "$B_NODE_IF" up
    if ((PARTIES == 3)); then
        ip -n "$NS_C_GW" link set "$C_IN_IF" up
        ip -n "$NS_C_GW" link set "$C_EXT_IF" up
        ip -n "$NS_C_NODE" link set "$C_NODE_IF" up
    fi

    ip -n "$NS_A_NODE" route add default via "$A_IN_IP" dev "$A_NODE_IF"
    ip -n "$NS_B_NODE" route add default via "$B_IN_IP" dev "$B_NODE_IF"
    ((PARTIES == 2)) || ip -n "$NS_C_NODE" route add default via "$C_IN_IP" dev "$C_NODE_IF"
    wait_carrier "$NS_A_NODE" "$A_NODE_IF" "$NS_A_GW" "$A_IN_IF" "$NS_A_GW" "$A_EXT_IF" \
                 "$NS_B_NODE" "$B_NODE_IF" "$NS_B_GW" "$B_IN_IF" "$NS_B_GW" "$B_EXT_IF"
    if ((PARTIES == 3)); then
        wait_carrier "$NS_C_NODE" "$C_NODE_IF" "$NS_C_GW" "$C_IN_IF" "$NS_C_GW" "$C_EXT_IF" \
                     "$NS_JOIN" "$J_A_IF" "$NS_JOIN" "$J_B_IF" "$NS_JOIN" "$J_C_IF" \
                     "$NS_JOIN" "$J_BR_IF"
        wait_forwarding "$NS_JOIN" "$J_A_IF" "$J_B_IF" "$J_C_IF"
    fi

    # Gateway configs: one fresh key per pair of parties, the same at both ends.
    (
        mkdir -p -- "$STATE_DIR"
        umask 077   # the configs hold the pairs' keys; the state dirs are private
        # A runs its data plane on a worker lcore (-l 0,1: lcore 1, control beside lcore 0); B
        # (and C) on its only lcore (-l 1): both ways of placing the data plane are exercised.
        if ((PARTIES == 2)); then
            key=$(new_key)
            mkdir -p -- "$STATE_DIR/a-state" "$STATE_DIR/b-state"
            write_conf "$A_CONF" alpha 1 a 0,1 "$A_IN_IF" "$A_IN_IP/$A_NET_LEN" \
                "$A_EXT_IF" "$A_EXT_IP/$EXT_NET_LEN" beta 2 "$B_EXT_IP" "$key"
            write_conf "$B_CONF" beta 2 b 1 "$B_IN_IF" "$B_IN_IP/$B_NET_LEN" \
                "$B_EXT_IF" "$B_EXT_IP/$EXT_NET_LEN" alpha 1 "$A_EXT_IP" "$key"
        else
            key_ab=$(new_key)
            key_ac=$(new_key)
            key_bc=$(new_key)
            mkdir -p -- "$STATE_DIR/a-state" "$STATE_DIR/b-state" "$STATE_DIR/c-state"
            write_conf "$A_CONF" alpha 1 a 0,1 "$A_IN_IF" "$A_IN_IP/$A_NET_LEN" \
                "$A_EXT_IF" "$A_EXT_IP/$EXT_NET_LEN" \
                beta 2 "$B_EXT_IP" "$key_ab" gamma 3 "$C_EXT_IP" "$key_ac"
            write_conf "$B_CONF" beta 2 b 1 "$B_IN_IF" "$B_IN_IP/$B_NET_LEN" \
                "$B_EXT_IF" "$B_EXT_IP/$EXT_NET_LEN" \
                alpha 1 "$A_EXT_IP" "$key_ab" gamma 3 "$C_EXT_IP" "$key_bc"
            write_conf "$C_CONF" gamma 3 c 1 "$C_IN_IF" "$C_IN_IP/$C_NET_LEN" \
                "$C_EXT_IF" "$C_EXT_IP/$EXT_NET_LEN" \
                alpha 1 "$A_EXT_IP" "$key_ac" beta 2 "$B_EXT_IP" "$key_bc"
        fi
    )

    UP_DONE=1
    trap - EXIT
    if ((PARTIES == 2)); then
        cat <<EOF
topology "$PREFIX" is up:
  $NS_A_NODE ($A_NODE_IF $A_NODE_IP) <-> $NS_A_GW ($A_IN_IF, gw $A_IN_IP | $A_EXT_IF, gw $A_EXT_IP)
  $NS_B_NODE ($B_NODE_IF $B_NODE_IP) <-> $NS_B_GW ($B_IN_IF, gw $B_IN_IP | $B_EXT_IF, gw $B_EXT_IP)
gateway configs:
  A: $A_CONF   (ip netns exec $NS_A_GW fedgated --config $A_CONF)
  B: $B_CONF   (ip netns exec $NS_B_GW fedgated --config $B_CONF)
variables: eval "\$($0 --prefix $PREFIX env)"
EOF
    else
        cat <<EOF
topology "$PREFIX" (3 parties) is up:
  $NS_A_NODE ($A_NODE_IF $A_NODE_IP) <-> $NS_A_GW ($A_IN_IF, gw $A_IN_IP | $A_EXT_IF, gw $A_EXT_IP)
  $NS_B_NODE ($B_NODE_IF $B_NODE_IP) <-> $NS_B_GW ($B_IN_IF, gw $B_IN_IP | $B_EXT_IF, gw $B_EXT_IP)
  $NS_C_NODE ($C_NODE_IF $C_NODE_IP) <-> $NS_C_GW ($C_IN_IF, gw $C_IN_IP | $C_EXT_IF, gw $C_EXT_IP)
  $NS_JOIN (bridge $J_BR_IF: $J_A_IF <-> $A_EXT_IF, $J_B_IF <-> $B_EXT_IF, $J_C_IF <-> $C_EXT_IF)
gateway configs:
  A: $A_CONF   (ip netns exec $NS_A_GW fedgated --config $A_CONF)
  B: $B_CONF   (ip netns exec $NS_B_GW fedgated --config $B_CONF)
  C: $C_CONF   (ip netns exec $NS_C_GW fedgated --config $C_CONF)
variables: eval "\$($0 --prefix $PREFIX --parties 3 env)"
EOF
    fi
}

# ---------------------------------------------------------------- status
cmd_status() {
    local ns missing=0
    for ns in "${ALL_NS[@]}"; do
        if ns_exists "$ns"; then
            echo "== $ns"
            ip -n "$ns" -br link | sed 's/^/  link  /'
            ip -n "$ns" -br addr | sed 's/^/  addr  /'
        else
            echo "== $ns: missing"
            missing=1
        fi
    done
    local f
    for f in "${ALL_CONF[@]}"; do
        if [[ -f $f ]]; then echo "config: $f"; else echo "config: $f (missing)"; fi
    done
    return "$missing"
}

# ---------------------------------------------------------------- env
cmd_env() {
    local v vars=(TOPO_PREFIX TOPO_STATE NS_A_NODE NS_A_GW NS_B_NODE NS_B_GW
                  A_NODE_IP B_NODE_IP A_IN_IP B_IN_IP A_EXT_IP B_EXT_IP
                  A_NODE_IF A_IN_IF A_EXT_IF B_NODE_IF B_IN_IF B_EXT_IF
                  A_CONF B_CONF A_SOCK B_SOCK)
    # The two-party output stays exactly what it always was; three parties add to it.
    ((PARTIES == 2)) || vars+=(TOPO_PARTIES NS_C_NODE NS_C_GW NS_JOIN C_NODE_IP C_IN_IP C_EXT_IP
                               C_NODE_IF C_IN_IF C_EXT_IF C_CONF C_SOCK)
    for v in "${vars[@]}"; do
        case $v in
            TOPO_PREFIX) printf '%s=%q\n' "$v" "$PREFIX" ;;
            TOPO_STATE) printf '%s=%q\n' "$v" "$STATE_DIR" ;;
            TOPO_PARTIES) printf '%s=%q\n' "$v" "$PARTIES" ;;
            *) printf '%s=%q\n' "$v" "${!v}" ;;
        esac
    done
}

case $CMD in
    up)     need_root; need_tools ip ethtool od sysctl; cmd_up ;;
    down)   need_root; need_tools ip; cmd_down ;;
    status) need_root; need_tools ip; cmd_status ;;
    env)    cmd_env ;;
esac
