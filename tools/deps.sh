#!/usr/bin/env bash
# tools/deps.sh — installs (with apt-get) everything fedgate needs to build, test and run.
# Idempotent: packages already present are skipped, so it costs a second on a set-up machine.
set -euo pipefail

PKGS=(
  # build
  build-essential cmake ninja-build meson pkg-config clang libclang-rt-14-dev
  # libraries
  libdpdk-dev dpdk dpdk-dev libibverbs-dev librdmacm-dev libtbb-dev
  libboost-program-options-dev libtomlplusplus-dev nlohmann-json3-dev libssl-dev
  libpcap-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  # sd_notify: readiness and the watchdog under systemd (Type=notify)
  libsystemd-dev
  # [cluster]: etcd's v3 gRPC API (gRPC, protobuf and their code generators), its GET /health over
  # HTTP (libcurl); a gateway group's store in the tests
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcurl4-openssl-dev etcd-server etcd-client
  # the Python module and the federated-learning example
  pybind11-dev python3-dev python3-pytest python3-numpy python3-grpcio
  # test topology and traffic
  iproute2 iputils-ping ethtool procps python3 python3-scapy iperf3 curl nftables tshark sockperf
  # the data plane's instructions a packet, counted by stepping it (nat_bench.sh NAT_BENCH_INSNS)
  gdb
  # the service and man pages: systemd-analyze verify, groff and man to render them
  systemd groff-base man-db
  # Debian packages (tools/package.sh, tests/install/packages.sh): dpkg-shlibdeps computes Depends
  dpkg-dev
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "deps.sh: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
