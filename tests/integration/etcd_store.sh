#!/usr/bin/env bash
# Integration: EtcdStore, the gateway group's etcd client (etcd's v3 gRPC API), against a real
# three-member etcd (lib_etcd.sh) from a client namespace on the store's network. Runs the cases of
# tests/integration/etcd_store_test.cpp phase by phase:
#   Healthy.*  with every member up; then etcdctl checks that a key the client wrote is there;
#   OneDown.*  member 1 killed (and listed first, so every call moves on to another member), once
#              the other two serve;
#   NoQuorum.* member 2 killed too;
# then restarts both, waits until the cluster is healthy, and runs Healthy.* again. Cleans up on
# any exit (namespaces, links, members, work dir).
# usage: etcd_store.sh BUILD_DIR
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
BUILD=${1:?usage: etcd_store.sh BUILD_DIR}
BIN=$BUILD/tests/fedgate_etcd_store_tests
[[ -x $BIN ]] || { echo "etcd_store.sh: $BIN is missing (build the tests)"; exit 1; }
for tool in etcd etcdctl ip; do
    command -v $tool >/dev/null || { echo "etcd_store.sh: $tool is missing (tools/deps.sh installs it)"; exit 1; }
done

HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib_etcd.sh"

PREFIX=es$((RANDOM % 1000))
CLIENT_NS=$PREFIX-client
cleanup() {
    etcd_down
    ip netns del "$CLIENT_NS" 2>/dev/null || true
}
trap cleanup EXIT

FAILED=0
phase() { # phase NAME FILTER
    echo "== $1"
    if ip netns exec "$CLIENT_NS" env FEDGATE_ETCD_ENDPOINTS="$ENDPOINTS" FEDGATE_ETCD_RUN="$PREFIX-$1" \
        "$BIN" --gtest_filter="$2" --gtest_brief=1; then
        echo "PASS: $1"
    else
        echo "FAIL: $1"
        FAILED=1
    fi
}

etcd_up "$PREFIX"
ip netns add "$CLIENT_NS"
ip -n "$CLIENT_NS" link set lo up
etcd_attach "$CLIENT_NS" 198.18.250.31
ENDPOINTS=$(IFS=,; echo "${ETCD_URLS[*]}")

phase healthy 'Healthy.*'
# What the client wrote is what etcd holds: read back with etcd's own client.
got=$(etcd_ctl get --print-value-only "/fedgate-test/$PREFIX-healthy/kv/c")
if [[ $got == 3 ]]; then echo "PASS: etcdctl reads the value the client wrote"; else echo "FAIL: etcdctl read '$got', not 3"; FAILED=1; fi

etcd_kill 1
# If member 1 led, the other two elect a new leader first (about a second): the phase is about the
# client moving on to a member that serves, not about the election.
etcd_wait_healthy 2 3
phase one-down 'OneDown.*'
etcd_kill 2
phase no-quorum 'NoQuorum.*'

etcd_start 1
etcd_start 2
etcd_wait_healthy
phase healthy-again 'Healthy.*'

exit "$FAILED"
