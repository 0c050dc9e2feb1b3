#!/usr/bin/env bash
# fedgated as a Type=notify service, without needing systemd: a stand-in for systemd's notify socket
# ($NOTIFY_SOCKET, a Unix datagram socket) and the journal's stream ($JOURNAL_STREAM naming
# stderr). Checked: READY=1 comes only when the management socket answers with every port up (the
# stand-in asks it the moment READY arrives) and STATUS= says so; WATCHDOG=1 comes while the data
# plane runs (WATCHDOG_USEC=400000: every 200 ms); a reload is RELOADING=1 then READY=1; SIGTERM is
# STOPPING=1 and exit 0; every line on the journal stream carries its priority ("<N>"), and no
# message comes twice. Where systemd runs as PID 1, a transient Type=notify unit is also started
# with systemd-run and must be active once systemd-run returns.
# usage: notify.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for the EAL"; exit 77; }
BUILD=$(realpath "${1:?usage: notify.sh BUILD_DIR}")
D=$BUILD/controlplane/fedgated
WORK=$(mktemp -d)
chmod 755 "$WORK"
PREFIX=fgnotify$$
GW_PID= LISTENER_PID=
cleanup() {
    [[ -z $GW_PID ]] || { kill "$GW_PID" 2>/dev/null || true; wait "$GW_PID" 2>/dev/null || true; }
    [[ -z $LISTENER_PID ]] || { kill "$LISTENER_PID" 2>/dev/null || true; wait "$LISTENER_PID" 2>/dev/null || true; }
    if [[ -n ${UNIT:-} ]]; then systemctl stop "$UNIT" 2>/dev/null || true; fi
    rm -rf "$WORK" "/var/run/dpdk/$PREFIX" "/var/run/dpdk/$PREFIX-sd"
}
trap cleanup EXIT
failures=0
ok() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; failures=$((failures + 1)); }
wait_for() { # wait_for WHAT CMD... — polls CMD for up to 60 s
    local what=$1 i
    shift
    for ((i = 0; i < 600; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "     timed out waiting for $what" >&2
    return 1
}

write_conf() { # write_conf FILE PREFIX
    cat >"$1" <<TOML
[gateway]
party = "alpha"
party_id = 1
socket = "$WORK/$2.sock"
state_dir = "$WORK/$2-state"
[eal]
args = ["-l", "0", "--no-huge", "--no-shconf", "-m", "128", "--no-pci", "--file-prefix", "$2"]
[[port]]
name = "internal"
role = "internal"
device = "net_null0,no-rx=1"
address = "198.18.1.1/24"
[[port]]
name = "external"
role = "external"
device = "net_null1,no-rx=1"
address = "198.19.0.1/24"
[[peer]]
party = "beta"
party_id = 2
address = "198.19.0.2"
key = "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
TOML
}
write_conf "$WORK/gw.toml" "$PREFIX"

# The stand-in for systemd: logs every datagram, one line each ("READY=1|STATUS=..."), and when
# READY=1 arrives asks the gateway's socket for status at once, logging what it found.
cat >"$WORK/listener.py" <<'PY'
import json, os, socket, sys
path, sock_path, log = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
out = open(log, "a", buffering=1)
def status():
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(2)
        c.connect(sock_path)
        c.sendall(b'{"cmd":"status"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        r = json.loads(data)
        up = all(p["link"]["up"] for p in r["result"]["ports"])
        return f"answered ok={r['ok']} ports_up={up}"
    except Exception as e:
        return f"no answer ({e})"
while True:
    msg = s.recv(4096).decode()
    out.write(msg.replace("\n", "|") + "\n")
    if "READY=1" in msg.split("\n"):
        out.write("at READY: " + status() + "\n")
PY
/usr/bin/python3 "$WORK/listener.py" "$WORK/notify.sock" "$WORK/$PREFIX.sock" "$WORK/notify.log" &
LISTENER_PID=$!
wait_for "the stand-in's socket" test -S "$WORK/notify.sock"

# stderr on a file that $JOURNAL_STREAM names: fedgated takes it for the journal.
: >"$WORK/stderr"
read -r dev ino < <(stat -c '%d %i' "$WORK/stderr")
NOTIFY_SOCKET=$WORK/notify.sock WATCHDOG_USEC=400000 JOURNAL_STREAM=$dev:$ino \
    "$D" --config "$WORK/gw.toml" >"$WORK/stdout" 2>>"$WORK/stderr" &
GW_PID=$!
has() { grep -qF -- "$1" "$WORK/notify.log"; }
count() { grep -cF -- "$1" "$WORK/notify.log" || true; }
if wait_for "READY=1" has "READY=1"; then ok "READY=1 arrives"; else fail "no READY=1"; fi
grep -q "^at READY: answered ok=True ports_up=True" "$WORK/notify.log" &&
    ok "at READY the management socket answers with every port up" || fail "at READY: $(grep '^at READY' "$WORK/notify.log")"
grep -q "^READY=1|STATUS=party alpha (id 1): 2 of 2 ports up, 1 worker(s), 1 peer(s)" "$WORK/notify.log" &&
    ok "READY carries a STATUS= summary" || fail "READY's STATUS: $(grep '^READY' "$WORK/notify.log")"
w0=$(count "WATCHDOG=1")
if wait_for "three more WATCHDOG=1" bash -c "(( \$(grep -cF WATCHDOG=1 '$WORK/notify.log') >= $w0 + 3 ))"; then
    ok "WATCHDOG=1 keeps coming while the data plane runs"
else
    fail "no WATCHDOG=1 (had $w0)"
fi

# A reload: RELOADING=1, then READY=1 again.
ready0=$(count "READY=1")
"$BUILD/tools/fedgatectl" --socket "$WORK/$PREFIX.sock" reload >/dev/null
if wait_for "READY=1 after the reload" bash -c "(( \$(grep -cF READY=1 '$WORK/notify.log') > $ready0 ))" && has "RELOADING=1|MONOTONIC_USEC="; then
    ok "a reload is RELOADING=1, then READY=1"
else
    fail "reload: $(tail -n 3 "$WORK/notify.log" | tr '\n' ' ')"
fi

# SIGTERM: STOPPING=1, exit 0.
kill -TERM "$GW_PID"
rc=0
wait "$GW_PID" || rc=$?
GW_PID=
[[ $rc == 0 ]] && ok "SIGTERM: exit 0" || fail "SIGTERM: exit $rc"
has "STOPPING=1" && ok "SIGTERM: STOPPING=1" || fail "no STOPPING=1"

# The journal stream: each line once, with its priority.
bad=$(grep -vc '^<[0-7]>' "$WORK/stderr" || true)
[[ $bad == 0 && -s $WORK/stderr ]] && ok "every line on the journal stream has a <N> priority ($(wc -l <"$WORK/stderr") lines)" ||
    fail "$bad lines without a priority: $(grep -v '^<[0-7]>' "$WORK/stderr" | head -n 3 | tr '\n' ' ')"
grep -q '^<6>fedgate.gateway: ready: party alpha' "$WORK/stderr" && ok "the ready line is info (<6>)" ||
    fail "no <6> ready line: $(grep ready "$WORK/stderr" | head -n 2)"
grep -q '^<4>fedgated: warning: .*peer\[0\].key: the key is inline' "$WORK/stderr" &&
    ok "the inline-key warning is a warning (<4>)" || fail "no <4> inline-key warning"
dups=$(sed 's/^<[0-7]>//' "$WORK/stderr" | grep 'fedgate.gateway: ready' | sort | uniq -d | wc -l)
[[ $dups == 0 ]] && ok "no message twice" || fail "$dups messages twice"
[[ ! -s $WORK/stdout ]] && ok "nothing on stdout" || fail "stdout: $(head -n 3 "$WORK/stdout")"

# Under a real systemd: a transient Type=notify unit is active once systemd-run returns.
if [[ $(cat /proc/1/comm 2>/dev/null) == systemd ]] && command -v systemd-run >/dev/null; then
    write_conf "$WORK/sd.toml" "$PREFIX-sd"
    UNIT=fedgate-notify-test-$$
    if systemd-run --unit="$UNIT" -p Type=notify -p NotifyAccess=main -p WatchdogSec=10s "$D" --config "$WORK/sd.toml" >/dev/null 2>&1 &&
        [[ $(systemctl is-active "$UNIT") == active ]]; then
        ok "systemd-run: the Type=notify unit is active when systemd-run returns"
    else
        fail "systemd-run: $(systemctl status "$UNIT" 2>&1 | tail -n 5 | tr '\n' ' ')"
    fi
    systemctl stop "$UNIT" || true
else
    echo "skip - systemd-run: systemd is not PID 1 here"
fi

((failures == 0)) || { echo "$failures checks failed"; exit 1; }
echo "all checks passed"
