#!/usr/bin/env bash
# Integration: the Prometheus endpoint and run-time log levels of a running gateway. Gateway A has
# [metrics] listen = 127.0.0.1:9410 (its namespace has no kernel address but loopback: its ports
# belong to the data plane), B has no [metrics] table. A's /metrics parses as exposition text, its
# counters agree with fedgatectl stats and move with pings; other paths and methods are refused;
# nothing listens in B's namespace. `fedgatectl log level|list` change and show rte_log levels.
# Cleans up on any exit.
# usage: metrics.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }

LAB_BUILD=$(realpath "${1:?usage: metrics.sh BUILD_DIR}")
LAB_PREFIX=m$((RANDOM % 1000))
source "$(dirname "$0")/../../tools/lab.sh"
WORK=$(mktemp -d)
cleanup() {
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
jctl() { local g=$1 expr=$2; shift 2; lab_ctl "$g" "$@" --json | python3 -c "import json,sys; r=json.load(sys.stdin); print($expr)"; }

METRICS=127.0.0.1:9410
lab_edit_configs() {
    printf '\n[metrics]\nlisten = "%s"\n\n[log]\nlevel = "info"\ntypes = { "fedgate.connect" = "notice" }\n' \
        "$METRICS" >>"$A_CONF"
}
lab_up

# http PATH [CURL-ARGS...] — curl inside A's gateway namespace; prints the body, the status code last.
http() { local path=$1; shift; ip netns exec "$NS_A_GW" curl -sS --max-time 10 -w '\n%{http_code}' "$@" "http://$METRICS$path"; }
scrape() { http /metrics -o "$WORK/metrics.txt" >"$WORK/code" && [[ $(tail -1 "$WORK/code") == 200 ]]; }
# The exposition format, line by line: HELP/TYPE once per family before its samples, each sample
# `name{label="value",...} number` of the family last typed. Prints the number of samples.
cat >"$WORK/parse.py" <<'PY'
import re, sys
name = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
value = r'"(?:[^"\\\n]|\\[\\"n])*"'
label = r'[a-zA-Z_][a-zA-Z0-9_]*=' + value
sample = re.compile(r'^(' + name + r')(\{' + label + r'(?:,' + label + r')*\})? (-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)$')
helps, types, family, n = set(), {}, None, 0
for i, line in enumerate(open(sys.argv[1]).read().splitlines(), 1):
    if m := re.match(r'^# HELP (' + name + r') ', line):
        assert m[1] not in helps, f'line {i}: second HELP'; helps.add(m[1])
    elif m := re.match(r'^# TYPE (' + name + r') (counter|gauge)$', line):
        assert m[1] not in types, f'line {i}: second TYPE'; types[m[1]] = m[2]; family = m[1]
        assert (m[2] == 'counter') == m[1].endswith('_total'), f'line {i}: {m[1]} is a {m[2]}'
    elif m := sample.match(line):
        assert m[1] == family, f'line {i}: {m[1]} outside its family'; n += 1
    else:
        raise SystemExit(f'line {i} is not exposition format: {line!r}')
assert helps == set(types), 'HELP and TYPE differ'
print(n)
PY
# metric FILE 'NAME{LABELS}' — the sample's value
metric() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

check "A's /metrics answers 200" scrape
check "the body is Prometheus text exposition 0.0.4 (HELP, TYPE, samples)" python3 "$WORK/parse.py" "$WORK/metrics.txt"
echo "     ($(python3 "$WORK/parse.py" "$WORK/metrics.txt") samples)"
check "Content-Type is text/plain; version=0.0.4" \
    eq "$(ip netns exec "$NS_A_GW" curl -sS --max-time 10 -o /dev/null -w '%{content_type}' "http://$METRICS/metrics")" \
    "text/plain; version=0.0.4; charset=utf-8"
check "fedgate_info names the party" \
    eq "$(metric "$WORK/metrics.txt" 'fedgate_info{party="alpha",party_id="1",version="0.1.0"}')" 1
check "both ports have a link gauge" \
    eq "$(metric "$WORK/metrics.txt" 'fedgate_port_link_up{port="internal"}')$(metric "$WORK/metrics.txt" 'fedgate_port_link_up{port="external"}')" 11
check "the peer's stream counters carry peer=\"beta\"" \
    grep -q '^fedgate_peer_stream_messages_sent_total{peer="beta"} [0-9]' "$WORK/metrics.txt"

rx_before=$(metric "$WORK/metrics.txt" 'fedgate_port_rx_packets_total{port="internal"}')
ip netns exec "$NS_A_NODE" ping -c 3 -i 0.2 -W 5 -q "$A_IN_IP" >/dev/null
ip netns exec "$NS_A_NODE" ping -c 2 -i 0.2 -W 5 -q "$A_EXT_IP" >/dev/null
check "A's /metrics answers 200 after the pings" scrape
rx_after=$(metric "$WORK/metrics.txt" 'fedgate_port_rx_packets_total{port="internal"}')
check "the internal port's rx packets moved by at least the 5 echo requests ($rx_before -> $rx_after)" \
    test "$rx_after" -ge $((rx_before + 5))
check "echo replies as fedgatectl stats counts them" \
    eq "$(metric "$WORK/metrics.txt" fedgate_icmp_echo_replies_sent_total)" "$(jctl a 'r["icmp"]["echo_replies_sent"]' stats)"
check "mappings as fedgatectl stats counts them" \
    eq "$(metric "$WORK/metrics.txt" 'fedgate_mappings{kind="import"}')" "$(jctl a 'r["maps"]["imports"]' stats)"

check "another path is 404" eq "$(http /other -o /dev/null)" $'\n404'
check "POST is 405" eq "$(http /metrics -o /dev/null -X POST)" $'\n405'
check "a garbage request is 400" \
    eq "$(ip netns exec "$NS_A_GW" python3 -c "
import socket; s = socket.create_connection(('127.0.0.1', 9410), 10); s.sendall(b'\x16\x03\x01 hello\r\n\r\n')
print(s.recv(100).split(b'\r\n')[0].decode())")" "HTTP/1.1 400 Bad Request"
check "off by default: nothing listens in B's gateway namespace" eq "$(ip netns exec "$NS_B_GW" ss -Hltn | wc -l)" 0

# --- log levels ---
check "[log] level set fedgate.gateway to info" eq "$(jctl a '[t["level"] for t in r["types"] if t["type"] == "fedgate.gateway"]' log list)" "['info']"
check "[log] types set fedgate.connect to notice" eq "$(jctl a '[t["level"] for t in r["types"] if t["type"] == "fedgate.connect"]' log list)" "['notice']"
check "log list shows DPDK's lib.eal too" eq "$(jctl a '"lib.eal" in [t["type"] for t in r["types"]]' log list)" True
check "log level fedgate.resolve debug says what changed" eq "$(lab_ctl a log level fedgate.resolve debug)" "fedgate.resolve: info -> debug"
check "... and log list shows it" eq "$(jctl a '[t["level"] for t in r["types"] if t["type"] == "fedgate.resolve"]' log list)" "['debug']"
check "a glob sets every fedgate type" \
    eq "$(lab_ctl a log level 'fedgate.*' warning | wc -l)" \
    "$(jctl a 'len([t for t in r["types"] if t["type"].startswith("fedgate.")])' log list)"
before=$(jctl a 'r["types"]' log list)
lab_ctl a log level lib.nope debug >"$WORK/out" 2>&1 && rc=0 || rc=$?
check "an unknown type exits 1 naming it" eq "$rc:$(cat "$WORK/out")" \
    "1:fedgatectl: log_level: no registered log type is named 'lib.nope' (log_list shows them)"
check "... and changes nothing" eq "$(jctl a 'r["types"]' log list)" "$before"

lab_stop a
check "A exits 0" eq "$LAB_RC" 0
check "nothing listens on $METRICS after A stopped" eq "$(ip netns exec "$NS_A_GW" ss -Hltn | wc -l)" 0

((failures == 0)) || { echo "$failures checks failed"; exit 1; }
echo "all checks passed"
