#!/usr/bin/env bash
# tools/package.sh — builds fedgate's Debian packages with CPack's DEB generator
# (dist/debian/packages.cmake): fedgated, fedgate-node, libfedgate-client0, libfedgate-client-dev.
# Configures BUILD_DIR as a Release build for the prefix /usr (so the client library goes to the
# multiarch directory), builds it without the tests, and runs `cpack -G DEB` there; the .deb files
# are left in BUILD_DIR. Install them with
#   sudo apt-get install ./BUILD_DIR/fedgated_*.deb ./BUILD_DIR/fedgate-node_*.deb
# usage: tools/package.sh [BUILD_DIR]     (default: build-deb; JOBS=N for the build's parallelism)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-deb}
JOBS=${JOBS:-$(nproc)}
command -v dpkg-shlibdeps >/dev/null || { echo "package.sh: dpkg-shlibdeps is missing (tools/deps.sh installs dpkg-dev)" >&2; exit 1; }
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DFEDGATE_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS"
(cd "$BUILD" && cpack -G DEB)
for deb in "$BUILD"/*.deb; do
    echo "$deb: $(dpkg-deb -f "$deb" Depends)"
done
