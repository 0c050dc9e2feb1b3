#!/usr/bin/env bash
# Integration: DPDK telemetry of a running gateway. After pings, a UDP flow through a mapping added
# with fedgatectl and processes registered with fedgate-node, gateway A's telemetry socket (read
# the way dpdk-telemetry.py reads it) lists the /fedgate/ commands beside DPDK's /ethdev/ ones and
# answers them with what fedgatectl reports; a client asking during shutdown does not hold up a
# clean exit. Cleans up on any exit.
# usage: telemetry.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: telemetry.sh BUILD_DIR}")
LAB_PREFIX=t$((RANDOM % 1000))
source "$(dirname "$0")/../../tools/lab.sh"
NODE=$LAB_BUILD/tools/fedgate-node
WORK=$(mktemp -d)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done  # not `wait`: that waits for the gateways too
    lab_down
    rm -rf "$WORK"
}
trap cleanup EXIT

failures=0
check() { # check DESCRIPTION CMD... — runs CMD, records a failure instead of stopping
    local what=$1
    shift
    if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; failures=$((failures + 1)); fi
}
eq() { [[ $1 == "$2" ]] || { echo "     expected '$2', got '$1'" >&2; return 1; }; }
# jctl a|b PY-EXPR ARGS... — a Python expression over fedgatectl's --json reply r
jctl() { local g=$1 expr=$2; shift 2; lab_ctl "$g" "$@" --json | python3 -c "import json,sys; r=json.load(sys.stdin); print($expr)"; }

# A telemetry client as usertools/dpdk-telemetry.py is: SOCK_SEQPACKET, the info message first,
# then one reply per command. `tel.py SOCKET COMMAND PY-EXPR` prints the expression over the reply r.
cat >"$WORK/tel.py" <<'PY'
import json, socket, sys
path, cmd, expr = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
info = json.loads(s.recv(1 << 16).decode())
s.send(cmd.encode())
r = json.loads(s.recv(2 * info["max_output_len"]).decode())[cmd.split(",")[0]]
print(eval(expr))
PY
# `tel_hammer.py SOCKET` asks again and again on one connection until the gateway goes away; it
# prints how many replies it had, and how many of them were null (the gateway stopping). It reads
# the tables stop() frees, but not the sessions: a session list asks the lcore, and one asked after
# the lcore has stopped waits out its 5 s timeout and leaves its request in the ring (by design).
cat >"$WORK/tel_hammer.py" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
s.recv(1 << 16)
n = nulls = 0
try:
    while True:
        cmd = ("/fedgate/stats", "/fedgate/ports", "/fedgate/dir", "/fedgate/maps")[n % 4]
        s.send(cmd.encode())
        data = s.recv(1 << 16)
        if not data:
            break
        n += 1
        nulls += json.loads(data.decode())[cmd] is None
        if n == 1:
            print("started", flush=True)
except OSError:
    pass
print(n, nulls, flush=True)
PY

lab_up

# The EAL keeps its runtime directory, with the telemetry socket, under the --file-prefix of the
# config's EAL arguments (also with --no-shconf).
A_PREFIX=$(/usr/bin/python3 -c "import tomllib; a=tomllib.load(open('$A_CONF','rb'))['eal']['args']; print(a[a.index('--file-prefix')+1])")
TEL_SOCK=/var/run/dpdk/$A_PREFIX/dpdk_telemetry.v2
tel() { /usr/bin/python3 "$WORK/tel.py" "$TEL_SOCK" "$@"; }

check "A's telemetry socket is in its EAL runtime directory" test -S "$TEL_SOCK"
check "/ lists the fedgate commands beside /ethdev/list" \
    eq "$(tel / '" ".join(c for c in r if c.startswith("/fedgate/") or c == "/ethdev/list")')" \
    "/ethdev/list /fedgate/dir /fedgate/maps /fedgate/ports /fedgate/sessions /fedgate/stats"
check "/help describes /fedgate/sessions" eq "$(tel /help,/fedgate/sessions '"OFFSET" in r["/fedgate/sessions"]')" True

# --- stats after pings ---
ip netns exec "$NS_A_NODE" ping -c 3 -i 0.2 -W 5 -q "$A_IN_IP" >/dev/null
ip netns exec "$NS_A_NODE" ping -c 2 -i 0.2 -W 5 -q "$A_EXT_IP" >/dev/null
replies=$(jctl a 'r["icmp"]["echo_replies_sent"]' stats)
check "fedgatectl counted the 5 echo replies" eq "$replies" 5
check "/fedgate/stats: icmp echo_replies_sent as fedgatectl stats" eq "$(tel /fedgate/stats 'r["icmp"]["echo_replies_sent"]')" "$replies"
check "/fedgate/stats,icmp: the section alone" \
    eq "$(tel /fedgate/stats,icmp 'r["echo_requests_received"], r["echo_replies_sent"]')" "(5, 5)"
check "/fedgate/stats: every drop reason fedgatectl stats has" \
    eq "$(tel /fedgate/stats '" ".join(r["drops_by_reason"])')" "$(jctl a '" ".join(r["drops_by_reason"])' stats)"
check "/fedgate/stats fits whole (nothing truncated)" eq "$(tel /fedgate/stats '"truncated" in r')" False

# --- ports ---
check "/fedgate/ports names both ports, with their addresses" \
    eq "$(tel /fedgate/ports '" ".join(p["name"]+"="+p["address"] for p in r["ports"].values())')" \
    "internal=198.18.1.1/24 external=198.19.0.1/24"
check "/fedgate/ports: links up, MACs as fedgatectl status" \
    eq "$(tel /fedgate/ports '" ".join(str(p["link"]["up"])+p["mac"] for p in r["ports"].values())')" \
    "$(jctl a '" ".join("1"+p["mac"] for p in r["ports"])' status)"
check "/fedgate/ports,internal: its echo requests among its rx packets, its drops by reason" \
    eq "$(tel /fedgate/ports,internal 'r["name"], r["rx_packets"] >= 5, "drops_by_reason" in r, "ipackets" in r["hw"]')" \
    "('internal', True, True, True)"

# --- a mapping added with fedgatectl, and a session a UDP flow opens through it ---
lab_ctl a map add import --cluster tel --proto udp --port 5300 --peer beta --peer-port 15300 >/dev/null
lab_ctl b map add export --cluster tel --proto udp --port 15300 --node "$B_NODE_IP:5399" >/dev/null
check "/fedgate/maps shows the mapping" \
    eq "$(tel /fedgate/maps '[(m["kind"], m["cluster"], m["proto"], m["port"], m["peer"], m["peer_port"], m["source"]) for m in r["mappings"].values()], r["total"], r["shown"]')" \
    "([('import', 'tel', 'udp', 5300, 'beta', 15300, 'cli')], 1, 1)"
ip netns exec "$NS_A_NODE" /usr/bin/python3 -c "
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('$A_NODE_IP', 40123))
for _ in range(3):
    s.sendto(b'telemetry', ('$A_IN_IP', 5300)); time.sleep(0.1)"
a_session() { [[ $(jctl a 'r["total"]' session list) -ge 1 ]]; }
check "A opened a session for the flow" lab_wait "A to open a session" a_session
check "/fedgate/sessions: the total as fedgatectl session list" \
    eq "$(tel /fedgate/sessions 'r["total"], r["shown"], r["offset"], r["created"] >= 1')" \
    "$(jctl a '(r["total"], len(r["sessions"]), 0, True)' session list)"
check "/fedgate/sessions: the flow's session, both sides" \
    eq "$(tel /fedgate/sessions '" ".join((s := r["sessions"]["0"])[k] for k in ("kind", "proto")) + " " + s["in"]["src"] + " " + s["in"]["dst"] + " " + s["out"]["dst"]')" \
    "import udp $A_NODE_IP:40123 $A_IN_IP:5300 $B_EXT_IP:15300"
check "/fedgate/sessions,1: past the last one, an empty page" \
    eq "$(tel /fedgate/sessions,1 'r["offset"], r["shown"], len(r["sessions"]), "next_offset" in r')" "(1, 0, 0, False)"
check "/fedgate/sessions,x: a bad offset is an error reply" \
    eq "$(tel /fedgate/sessions,x 'r["error"]')" "OFFSET must be an integer 0..99999, not 'x'"

# --- the directory: a process of A's node (local) and one of B's (announced to A) ---
register() { # register a|b PID — fedgate-node on that party's node, in the background
    local ns gw ip out=$WORK/reg-$2
    case $1 in a) ns=$NS_A_NODE gw=$A_IN_IP ip=$A_NODE_IP ;; b) ns=$NS_B_NODE gw=$B_IN_IP ip=$B_NODE_IP ;; esac
    ip netns exec "$ns" "$NODE" --gateway "$gw" register --pid "$2" --transport tcp --listen "$ip:5000" >"$out" 2>&1 &
    BG_PIDS+=($!)
    lab_wait "node $1 to register $2" grep -q "^registered $2" "$out" || { cat "$out" >&2; return 1; }
}
register a 1.7.42
register b 2.7.43
a_holds() { lab_ctl a dir show 2.7.43 >/dev/null 2>&1; }
check "A learns B's process from B's announce" lab_wait "A to hold 2.7.43" a_holds
check "/fedgate/dir: counts by kind, the total as fedgatectl dir list" \
    eq "$(tel /fedgate/dir 'r["total"], r["local"], r["announced"]')" "$(jctl a '(r["total"], 1, 1)' dir list)"
check "/fedgate/dir: both processes, with kind and address" \
    eq "$(tel /fedgate/dir '" ".join(sorted(e["key"]+":"+e["kind"]+":"+e["record"]["address"] for e in r["entries"].values()))')" \
    "1.7.42:local:$A_NODE_IP:5000 2.7.43:announced:$B_NODE_IP:5000"

# --- DPDK's own client, when the dpdk package provides it ---
DPDK_TELEMETRY=$(command -v dpdk-telemetry.py || ls /usr/share/dpdk/usertools/dpdk-telemetry.py 2>/dev/null || true)
if [[ -n $DPDK_TELEMETRY ]]; then
    check "dpdk-telemetry.py -f $A_PREFIX answers /fedgate/ports" \
        eq "$(echo /fedgate/ports | /usr/bin/python3 "$DPDK_TELEMETRY" -f "$A_PREFIX" | tail -1 |
            python3 -c 'import json,sys; r=json.load(sys.stdin)["/fedgate/ports"]; print(r["count"], r["ports"]["1"]["name"])')" \
        "2 external"
else
    echo "skip - dpdk-telemetry.py is not installed (Debian package dpdk)"
fi

# --- a client asking all through shutdown: A still stops cleanly, and its socket goes ---
/usr/bin/python3 "$WORK/tel_hammer.py" "$TEL_SOCK" >"$WORK/hammer.out" 2>&1 &
HAMMER=$!
BG_PIDS+=("$HAMMER")
lab_wait "the telemetry client to start" grep -q started "$WORK/hammer.out" || true
stop_started=$SECONDS
lab_stop a
check "A exits 0 with a telemetry client asking" eq "$LAB_RC" 0
[[ $LAB_RC == 0 ]] || tail -20 "$LAB_LOGS/a.log" | sed 's/^/     a.log: /'
echo "     (A stopped in $((SECONDS - stop_started)) s)"
wait "$HAMMER" || true
check "the client had replies until A went" eq "$(tail -1 "$WORK/hammer.out" | awk '{print ($1 > 1)}')" 1
echo "     (the client: $(tail -1 "$WORK/hammer.out" | awk '{print $1 " replies, " $2 " null"}'))"
check "A's telemetry socket is gone" test ! -e "$TEL_SOCK"

((failures == 0)) || { echo "$failures checks failed"; exit 1; }
echo "all checks passed"
