#!/usr/bin/env bash
# fedgated's command line and start-up refusals, run as a user would: bad flags exit 2, a bad config
# exits 1 naming file, line and key before any port is touched, --check validates without starting.
# usage: daemon_cli.sh BUILD_DIR
set -euo pipefail
BUILD=$(realpath "${1:?usage: daemon_cli.sh BUILD_DIR}")
D=$BUILD/controlplane/fedgated
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
check() { # check WHAT WANT_RC WANT_TEXT -- CMD...
    local what=$1 want_rc=$2 want=$3 rc=0 out
    shift 4
    out=$("$@" 2>&1) || rc=$?
    if [[ $rc == "$want_rc" && $out == *"$want"* ]]; then
        echo "ok   - $what"
    else
        echo "FAIL - $what: rc $rc (want $want_rc), output: $out"
        failures=$((failures + 1))
    fi
}

cat >"$WORK/good.toml" <<TOML
[gateway]
party = "alpha"
party_id = 1
socket = "$WORK/a.sock"
state_dir = "$WORK/state"
[eal]
args = ["-l", "0", "--no-huge", "--no-shconf", "-m", "64", "--no-pci", "--file-prefix", "fgcli$$"]
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
TOML
sed 's|address = "198.19.0.1/24"|address = "198.19.0.0/24"|' "$WORK/good.toml" >"$WORK/bad.toml"

check "--help teaches and exits 0" 0 "usage: fedgated --config FILE" -- "$D" --help
check "--version" 0 "fedgated " -- "$D" --version
check "unknown flag exits 2" 2 "fedgated: unrecognised option '--bogus'" -- "$D" --bogus
check "missing --config exits 2" 2 "--config FILE is required" -- "$D"
check "--check accepts a good file" 0 "good.toml: ok: party alpha (id 1), 2 ports, 0 peers" -- "$D" --config "$WORK/good.toml" --check
check "--check names file, line and key of a bad one" 1 "bad.toml:17:11: port[1].address: '198.19.0.0/24' is the network or broadcast address" -- "$D" --config "$WORK/bad.toml" --check
check "a missing file is named" 1 "$WORK/none.toml: cannot open" -- "$D" --config "$WORK/none.toml"
# A bad config stops the daemon before the EAL: no runtime directory, no socket.
check "a bad config exits 1 before start-up" 1 "config error" -- "$D" --config "$WORK/bad.toml"
[[ ! -e /var/run/dpdk/fgcli$$ && ! -e $WORK/a.sock ]] && echo "ok   - nothing was started" ||
    { echo "FAIL - the EAL or the socket came up for a bad config"; failures=$((failures + 1)); }
rm -rf "/var/run/dpdk/fgcli$$"

# A group member whose [cluster] sync address is not one of its host's: start-up fails naming it.
# In a namespace of its own with only loopback, so the store's endpoint is unreachable at once and
# nothing leaves the machine.
NS=fgcli$$
ip netns add "$NS"
trap 'ip netns del "$NS" 2>/dev/null; rm -rf "$WORK" "/var/run/dpdk/fgcli$$"' EXIT
ip -n "$NS" link set lo up
{ cat "$WORK/good.toml"; printf '[cluster]\netcd = ["http://198.18.250.11:2379"]\nmember = "a1"\nsync = "198.18.250.21:7960"\nsync_key = "9c3e51a07d2b48f6a1e03c5d7b9f2e64"\n'; } \
    >"$WORK/sync.toml"
check "a [cluster] sync address the host does not have stops start-up, named" 1 \
    "[cluster] sync: cannot bind 198.18.250.21:7960" -- ip netns exec "$NS" "$D" --config "$WORK/sync.toml"
((failures == 0)) || { echo "$failures checks failed"; exit 1; }
echo "all checks passed"
