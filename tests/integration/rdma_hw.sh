#!/usr/bin/env bash
# Integration: the verbs backend over a real RDMA device (RoCE v2 NIC or rxe). Without one it skips
# (exit 77) and says why; with one, fedgate_verbs_loopback moves 64 MiB each way between two
# connections on the device's own GID and compares the bytes.
# usage: rdma_hw.sh BUILD_DIR [DEVICE [PORT [GID_INDEX]]]
set -euo pipefail
BUILD=$(realpath "${1:?usage: rdma_hw.sh BUILD_DIR [DEVICE [PORT [GID_INDEX]]]}")
shift
PROBE=$BUILD/drivers/fedgate_verbs_probe
LOOPBACK=$BUILD/drivers/fedgate_verbs_loopback
SKIP_MSG="SKIP: no RDMA device (ibv_get_device_list found none); the verbs backend is covered by the FakeVerbs unit tests"

have_device() {
    if command -v ibv_devices >/dev/null 2>&1; then
        # ibv_devices prints a two-line header, then one line per device.
        [[ $(ibv_devices 2>/dev/null | tail -n +3 | grep -c .) -gt 0 ]]
    else
        local rc=0
        "$PROBE" "$@" >/dev/null 2>&1 || rc=$?
        [[ $rc -ne 3 ]]
    fi
}

if ! have_device "$@"; then
    echo "$SKIP_MSG"
    exit 77
fi
"$PROBE" "$@"
"$LOOPBACK" "$@"
