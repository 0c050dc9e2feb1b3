#!/usr/bin/env bash
# Integration: `fedgatectl reload` in the two-party topology. A mapping pair added to both config
# files and reloaded carries HTTP from node a to node b; a file with a TOML error, and one with a
# changed party_id, are refused naming the error while the running mappings keep working and
# `map list` stays as it was; a [log] level changed in the file shows in `log list` (after a reload,
# and after SIGHUP to fedgated); removing the peer (and its mapping) from A's file drops it from
# `status` and from A's resolution. Cleans up on any exit.
# usage: reload.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
for tool in curl python3; do
    command -v $tool >/dev/null || { echo "reload.sh: $tool is missing (tools/deps.sh installs it)"; exit 1; }
done

LAB_BUILD=$(realpath "${1:?usage: reload.sh BUILD_DIR}")
LAB_PREFIX=r$((RANDOM % 1000))
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

# reload_of a|b — fedgatectl reload's output and exit code ("OUTPUT\nrc=N"), stderr included.
reload_of() { local out rc=0; out=$(lab_ctl "$1" reload 2>&1) || rc=$?; printf '%s\nrc=%s' "$out" "$rc"; }
fetch() { ip netns exec "$NS_A_NODE" curl -s -m 5 "http://$A_IN_IP:$1/who"; }
maps() { lab_ctl a map list --json; }
node_resolve() { # node_resolve PID — fedgate-node resolve on node a, as JSON (it exits 1 on not found)
    ip netns exec "$NS_A_NODE" "$NODE" --gateway "$A_IN_IP" resolve "$1" --json --timeout-ms 2000 || true
}

lab_edit_configs() {
    printf '\n[log]\ntypes = { "fedgate.resolve" = "info" }\n' >>"$A_CONF"
}
lab_up

mkdir -p "$WORK/www"
echo "node b" >"$WORK/www/who"
ip netns exec "$NS_B_NODE" python3 -m http.server 8000 --bind "$B_NODE_IP" --directory "$WORK/www" \
    >"$WORK/http.log" 2>&1 &
BG_PIDS+=($!)
lab_wait "http.server on node b" ip netns exec "$NS_B_NODE" curl -s -m 2 "http://$B_NODE_IP:8000/who"

lab_check "reloading an unchanged file changes nothing" lab_eq "$(reload_of a)" $'no changes\nrc=0'

# --- a mapping pair added to both files ---
cat >>"$A_CONF" <<TOML

[[import]]
cluster = "r1"
proto = "tcp"
port = 8080
peer = "beta"
peer_port = 9000
TOML
cat >>"$B_CONF" <<TOML

[[export]]
cluster = "r1"
proto = "tcp"
port = 9000
node = "$B_NODE_IP:8000"
allow_parties = ["alpha"]
TOML
lab_check "A's reload names the new import" lab_eq "$(reload_of a)" $'import tcp/8080 added\nrc=0'
lab_check "B's reload names the new export" lab_eq "$(reload_of b)" $'export tcp/9000 added\nrc=0'
lab_check "map list on A shows the import from the config" lab_eq \
    "$(lab_json a '[(m["cluster"], m["port"], m["source"]) for m in r["imports"]]' map list)" "[('r1', 8080, 'config')]"
lab_check "curl through the reloaded mapping reaches node b" lab_eq "$(fetch 8080)" "node b"
cp "$A_CONF" "$WORK/a.good"
maps_before=$(maps)

# --- a file with a TOML error is refused whole ---
printf '\n[[import]\ncluster = "r2"\n' >>"$A_CONF"
bad_line=$(grep -n '^\[\[import\]$' "$A_CONF" | cut -d: -f1)
out=$(reload_of a)
lab_check "a TOML error is refused with exit 1" lab_eq "${out##*$'\n'}" "rc=1"
lab_check "the refusal names the file and line" \
    bash -c '[[ $1 == "fedgatectl: reload refused, nothing changed: $2:$3:"* ]] || { echo "     got: $1" >&2; exit 1; }' \
    _ "$out" "$A_CONF" "$bad_line"
lab_check "map list is unchanged after the refusal" lab_eq "$(maps)" "$maps_before"
lab_check "the running mapping still carries traffic" lab_eq "$(fetch 8080)" "node b"

# --- a change only a restart can make is refused whole, even beside a live one ---
cp "$WORK/a.good" "$A_CONF"
sed -i '0,/^party_id = 1$/s//party_id = 7/' "$A_CONF"
sed -i 's/"fedgate.resolve" = "info"/"fedgate.resolve" = "debug"/' "$A_CONF"
lab_check "a changed party_id is refused naming it" lab_eq "$(reload_of a)" \
    $'fedgatectl: reload refused, nothing changed: [gateway] party_id: cannot change while running; restart fedgated\nrc=1'
lab_check "map list is unchanged after the party_id refusal" lab_eq "$(maps)" "$maps_before"
lab_check "the log level the refused file also changed was not applied" lab_eq \
    "$(lab_json a '[t["level"] for t in r["types"] if t["type"] == "fedgate.resolve"]' log list)" "['info']"
lab_check "the running mapping still carries traffic after the refusal" lab_eq "$(fetch 8080)" "node b"
status_a=$(lab_json a 'r["party_id"]' status)
lab_check "A still runs as party 1" lab_eq "$status_a" "1"

# --- a [log] level changed in the file ---
cp "$WORK/a.good" "$A_CONF"
sed -i 's/"fedgate.resolve" = "info"/"fedgate.resolve" = "debug"/' "$A_CONF"
lab_check "the reload names the log level it set" lab_eq "$(reload_of a)" $'log fedgate.resolve set to debug\nrc=0'
lab_check "log list shows the new level" lab_eq \
    "$(lab_json a '[t["level"] for t in r["types"] if t["type"] == "fedgate.resolve"]' log list)" "['debug']"

# --- SIGHUP reloads the same way ---
sed -i 's/"fedgate.resolve" = "debug"/"fedgate.resolve" = "notice"/' "$A_CONF"
kill -HUP "$LAB_PID_A"
resolve_level_is() { [[ $(lab_json a '[t["level"] for t in r["types"] if t["type"] == "fedgate.resolve"]' log list) == "['$1']" ]]; }
lab_check "SIGHUP to fedgated applies the file's new log level" lab_wait "A to reload on SIGHUP" resolve_level_is notice
lab_check "fedgated logged the SIGHUP reload" lab_wait "A's log to name the reload" \
    grep -q "SIGHUP: reloaded $A_CONF: 1 change(s)" "$LAB_LOGS/a.log"

# --- removing the peer ---
# A process on node b, announced to A: node a resolves it from A's cache while beta is a peer.
reg_out=$WORK/register.log
ip netns exec "$NS_B_NODE" "$NODE" --gateway "$B_IN_IP" register --pid 2.7.42 --transport tcp \
    --listen "$B_NODE_IP:5000" >"$reg_out" 2>&1 &
BG_PIDS+=($!)
lab_wait "node b to register 2.7.42" grep -q "^registered 2.7.42" "$reg_out"
announced() { [[ $(lab_json a 'r["kind"]' dir show 2.7.42 2>/dev/null) == announced ]]; }
lab_check "A learns 2.7.42 from beta's announce" lab_wait "A to hold 2.7.42" announced
lab_check "node a resolves 2.7.42 while beta is a peer" lab_eq \
    "$(node_resolve 2.7.42 | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"], r["address"])')" \
    "ok $B_NODE_IP:5000"
b_found=$(lab_json b 'r["resolution"]["resolve"]["peer_queries_found"]' stats)

# A's file without beta and without the import that names it.
python3 - "$A_CONF" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
# Drop every [[peer]] and [[import]] table: header to the next header or the end.
text = re.sub(r'(?ms)^\[\[(peer|import)\]\]\n.*?(?=^\[|\Z)', '', text)
open(path, "w").write(text)
PY
out=$(reload_of a)
lab_check "the reload names the removed peer and its import" lab_eq "$out" $'peer beta removed\nimport tcp/8080 removed\nrc=0'
lab_check "status no longer lists beta" lab_eq "$(lab_json a '[p["party"] for p in r["peers"]]' status)" "[]"
lab_check "A's directory no longer holds what beta announced" bash -c '! "$@" dir show 2.7.42 >/dev/null 2>&1' \
    _ "$LAB_BUILD/tools/fedgatectl" --socket "$A_SOCK"
lab_check "node a's resolution of 2.7.42 is no longer answered from beta" lab_eq \
    "$(node_resolve 2.7.42 | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"])')" "not_found"
lab_check "beta was not asked" lab_eq "$(lab_json b 'r["resolution"]["resolve"]["peer_queries_found"]' stats)" "$b_found"
lab_check "the removed import carries nothing" bash -c '! ip netns exec "$1" curl -s -m 2 "http://$2:8080/who"' \
    _ "$NS_A_NODE" "$A_IN_IP"
lab_check "map list on A has no imports" lab_eq "$(lab_json a 'r["imports"]' map list)" "[]"

lab_down
trap - EXIT
for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
rm -rf "$WORK"
lab_check "gateway A exited 0" lab_eq "$LAB_RC_A" "0"
lab_check "gateway B exited 0" lab_eq "$LAB_RC_B" "0"
echo "reload.sh: $LAB_FAILURES failure(s)"
((LAB_FAILURES == 0))
