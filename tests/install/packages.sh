#!/usr/bin/env bash
# The Debian packages: `cpack -G DEB` in the (already built) build dir makes fedgated, fedgate-node,
# libfedgate-client0 and libfedgate-client-dev; their contents and control fields are checked (every
# library a binary needs is in Depends as the Debian package that holds it, found by dpkg-shlibdeps,
# none listed by hand); `apt-get install ./...deb` installs them on this machine; the installed
# programs, unit, man pages and bash completion are checked and the daemon is started (by systemctl
# where systemd runs, else directly, on net_null ports) with a config and key file of its own.
# A trap purges the packages and removes every file the test made, whatever happens.
# usage: packages.sh BUILD_DIR   (root; exit 77: skipped, e.g. no root, no dpkg-shlibdeps, or a
#                                 fedgate already installed here that the test must not touch)
# ok and fail always succeed, so "test && ok || fail" is an if-else.
# shellcheck disable=SC2015,SC2016
set -euo pipefail
BUILD=$(realpath "${1:?usage: packages.sh BUILD_DIR}")
WORK=$(mktemp -d)
PACKAGES=(fedgated fedgate-node libfedgate-client0 libfedgate-client-dev)
installed=0 daemon_pid="" systemd_files=()
failures=0
ok() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
skip() { echo "skip - $*"; exit 77; }
# The unit's drop-in and the config under /etc, when systemd ran the daemon.
remove_systemd_files() {
    if ((${#systemd_files[@]})); then
        systemctl stop fedgated.service >/dev/null 2>&1
        rm -rf "${systemd_files[@]}"
        systemd_files=()
        systemctl daemon-reload >/dev/null 2>&1
    fi
    return 0
}
cleanup() {
    set +e
    [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    remove_systemd_files
    if ((installed)); then
        DEBIAN_FRONTEND=noninteractive apt-get remove --purge -y -qq "${PACKAGES[@]}" >"$WORK/purge.log" 2>&1 ||
            { echo "FAIL - apt-get remove --purge:"; cat "$WORK/purge.log"; }
    fi
    rm -rf "$WORK" "/var/run/dpdk/fgpkg$$"
}
trap cleanup EXIT

# ---- what the test needs, and nothing of an operator's to touch ------------------------------------
[[ $(id -u) == 0 ]] || skip "packages: needs root to install them"
for tool in cpack dpkg-deb dpkg-shlibdeps apt-get; do
    command -v "$tool" >/dev/null || skip "packages: $tool is missing (tools/deps.sh installs dpkg-dev)"
done
for p in "${PACKAGES[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
        skip "packages: $p is installed on this machine already; the test would replace it"
    fi
done
for f in /usr/bin/fedgated /usr/bin/fedgatectl /usr/bin/fedgate-node /etc/fedgate; do
    [[ -e $f ]] && skip "packages: $f exists (a fedgate installed by hand?); the test would replace it"
done
[[ -f $BUILD/CPackConfig.cmake ]] || { fail "$BUILD/CPackConfig.cmake is missing (configure the build)"; exit 1; }

# ---- build the packages ------------------------------------------------------------------------------
start=$SECONDS
if ! (cd "$WORK" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/out") >"$WORK/cpack.log" 2>&1; then
    cat "$WORK/cpack.log"
    fail "cpack -G DEB"
    exit 1
fi
ok "cpack -G DEB ($((SECONDS - start)) s)"
deb() { # deb PACKAGE: its file
    local f
    f=$(find "$WORK/out" -maxdepth 1 -name "${1}_*.deb" | head -1)
    [[ -n $f ]] && echo "$f"
}
for p in "${PACKAGES[@]}"; do
    [[ -n $(deb "$p") ]] && ok "built $(basename "$(deb "$p")")" || { fail "no ${p}_*.deb: $(ls "$WORK/out")"; exit 1; }
done
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD/CMakeCache.txt")

# ---- contents ------------------------------------------------------------------------------------
contents() { dpkg-deb -c "$(deb "$1")" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort; }
expect_files() { # expect_files PACKAGE FILE...: the package holds exactly these files (and links)
    local p=$1 got want
    shift
    got=$(contents "$p")
    want=$(printf '%s\n' "$@" | sort)
    [[ $got == "$want" ]] && ok "$p holds: $(echo "$want" | tr '\n' ' ')" ||
        fail "$p's files differ: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
}
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
expect_files fedgated /usr/bin/fedgated /usr/bin/fedgatectl /lib/systemd/system/fedgated.service \
    /usr/libexec/fedgate/fedgate-hugepages /etc/fedgate/fedgate.toml.example \
    /usr/share/man/man8/fedgated.8 /usr/share/man/man8/fedgatectl.8 \
    /usr/share/bash-completion/completions/fedgatectl
expect_files fedgate-node /usr/bin/fedgate-node /usr/share/man/man1/fedgate-node.1 \
    /usr/share/bash-completion/completions/fedgate-node
expect_files libfedgate-client0 "/usr/$libdir/libfedgate-client.so.$version" "/usr/$libdir/libfedgate-client.so.${version%%.*}"
dev=$(contents libfedgate-client-dev)
for f in "/usr/$libdir/libfedgate-client.so" /usr/include/fedgate/fedgate.h /usr/include/fedgate/endpoint.hpp \
    /usr/include/fedgate/proto/resolve_wire.hpp "/usr/$libdir/pkgconfig/fedgate-client.pc" \
    "/usr/$libdir/cmake/fedgate/fedgate-config.cmake"; do
    grep -qxF "$f" <<<"$dev" && ok "libfedgate-client-dev holds $f" || fail "libfedgate-client-dev lacks $f"
done
# The unit names the installed paths, not cpack's staging directory.
unit=$(dpkg-deb --fsys-tarfile "$(deb fedgated)" | tar -xOf - ./lib/systemd/system/fedgated.service)
grep -qxF 'ExecStart=/usr/bin/fedgated --config ${FEDGATE_CONFIG}' <<<"$unit" &&
    grep -qxF 'Environment=FEDGATE_CONFIG=/etc/fedgate/fedgate.toml' <<<"$unit" &&
    grep -qxF 'ExecStartPre=+/usr/libexec/fedgate/fedgate-hugepages' <<<"$unit" &&
    ok "the packaged unit names /usr/bin/fedgated, /etc/fedgate and the helper" ||
    fail "the packaged unit's paths: $(grep -E '^(Exec|Environment=)' <<<"$unit" | tr '\n' ' ')"
dpkg-deb --ctrl-tarfile "$(deb fedgated)" | tar -xOf - ./conffiles | grep -qxF /etc/fedgate/fedgate.toml.example &&
    ok "the example config is a conffile" || fail "the example config is not in conffiles"

# ---- control fields: Depends computed from what the binaries link ---------------------------------
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
for p in "${PACKAGES[@]}"; do
    [[ $(field "$p" Package) == "$p" && $(field "$p" Version) == "$version"-* ]] &&
        ok "$p: Package $p, Version $(field "$p" Version), Architecture $(field "$p" Architecture)" ||
        fail "$p: Package '$(field "$p" Package)' Version '$(field "$p" Version)'"
done
# depends_on_needed PACKAGE BINARY: each library BINARY needs (ELF NEEDED) is in Depends as the
# package dpkg says holds it.
depends_on_needed() {
    local p=$1 bin=$2 depends lib path owner candidate missing=() n=0
    depends=" $(field "$p" Depends | tr ',|' '  ' | sed 's/([^)]*)//g' | tr -s ' ') "
    dpkg-deb -x "$(deb "$p")" "$WORK/x-$p"
    for lib in $(objdump -p "$WORK/x-$p$bin" | awk '$1 == "NEEDED" { print $2 }'); do
        # The loader's choice for this architecture (ldconfig lists 64-bit libraries with their ABI).
        path=$(awk -v l="$lib" '$1 == l && !found && /64/ { print $NF; found = 1 }' <<<"$ld_cache")
        [[ -n $path ]] || path=$(awk -v l="$lib" '$1 == l && !found { print $NF; found = 1 }' <<<"$ld_cache")
        owner=
        # dpkg knows a library by the path its package ships (/lib/... on a merged /usr, or /usr/lib/...).
        for candidate in "$path" "$(realpath "$path")" "${path#/usr}" "/usr${path}"; do
            owner=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1 || true)
            [[ -n $owner ]] && break
        done
        n=$((n + 1))
        [[ -n $owner && $depends == *" $owner "* ]] || missing+=("$lib (${owner:-no package})")
    done
    ((n > 0 && ${#missing[@]} == 0)) && ok "$p Depends on the package of each of the $n libraries $bin needs" ||
        fail "$p: Depends '$(field "$p" Depends)' lacks ${missing[*]:-every library (none found)}"
}
ld_cache=$(ldconfig -p)
depends_on_needed fedgated /usr/bin/fedgated
depends_on_needed fedgated /usr/bin/fedgatectl
depends_on_needed fedgate-node /usr/bin/fedgate-node
depends_on_needed libfedgate-client0 "/usr/$libdir/libfedgate-client.so.$version"
[[ $(field fedgated Depends) == *librte-* ]] && ok "fedgated depends on DPDK's packages (librte-*)" ||
    fail "fedgated's Depends names no DPDK package: $(field fedgated Depends)"
[[ $(field fedgate-node Depends) != *librte-* ]] && ok "fedgate-node does not depend on DPDK" ||
    fail "fedgate-node depends on DPDK: $(field fedgate-node Depends)"
[[ $(field libfedgate-client-dev Depends) == *"libfedgate-client0 (= $(field libfedgate-client0 Version))"* ]] &&
    ok "libfedgate-client-dev depends on libfedgate-client0 of its version" ||
    fail "libfedgate-client-dev Depends: $(field libfedgate-client-dev Depends)"

# ---- install them ------------------------------------------------------------------------------
installed=1
debs=()
for p in "${PACKAGES[@]}"; do debs+=("$(deb "$p")"); done
start=$SECONDS
if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >"$WORK/apt.log" 2>&1; then
    ok "apt-get install ./fedgated_*.deb ./fedgate-node_*.deb ./libfedgate-client*.deb ($((SECONDS - start)) s)"
else
    cat "$WORK/apt.log"
    fail "apt-get install of the packages"
    exit 1
fi
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" | grep -q 'install ok installed' && ok "dpkg: $p installed" || fail "dpkg: $p not installed"
done
expect() { # expect WHAT WANT_TEXT CMD...: CMD succeeds and prints WANT_TEXT
    local what=$1 want=$2 out rc=0
    shift 2
    out=$("$@" 2>&1) || rc=$?
    [[ $rc == 0 && $out == *"$want"* ]] && ok "$what" || fail "$what: rc $rc, output: $out"
}
expect "fedgated --version" "fedgated $version" /usr/bin/fedgated --version
expect "fedgatectl --version" "fedgatectl $version" fedgatectl --version
expect "fedgate-node --version" "fedgate-node $version" fedgate-node --version
[[ -f /lib/systemd/system/fedgated.service ]] && ok "the unit is in /lib/systemd/system" || fail "no /lib/systemd/system/fedgated.service"
for page in fedgated.8 fedgatectl.8 fedgate-node.1; do
    name=${page%.*}
    [[ $(man -w "${page##*.}" "$name" 2>/dev/null) == /usr/share/man/man${page##*.}/$page* ]] && ok "man ${page##*.} $name" ||
        fail "man -w ${page##*.} $name: $(man -w "${page##*.}" "$name" 2>&1)"
done
for prog in fedgatectl fedgate-node; do
    out=$(bash -c 'source "/usr/share/bash-completion/completions/$1" && complete -p "$1"' _ "$prog" 2>&1) &&
        [[ $out == *" $prog" ]] && ok "bash completion of $prog loads: $out" || fail "bash completion of $prog: $out"
done
expect "the installed client library is found with pkg-config" "$version" pkg-config --modversion fedgate-client

# ---- start the daemon --------------------------------------------------------------------------------
# A config of its own on net_null ports with no hugepages; its peer key in a file at 0600, made here.
conf_dir=$WORK/etc
[[ -d /run/systemd/system ]] && conf_dir=/etc/fedgate/pkgtest-$$
mkdir -p "$conf_dir"
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$conf_dir/beta.key")
socket=$WORK/fedgated.sock state=$WORK/state
[[ -d /run/systemd/system ]] && socket=/run/fedgate/fedgated.sock state=/var/lib/fedgate
cat >"$conf_dir/fedgate.toml" <<TOML
[gateway]
party = "alpha"
party_id = 1
socket = "$socket"
state_dir = "$state"
[eal]
args = ["-l", "0", "--no-huge", "--no-shconf", "-m", "64", "--no-pci", "--file-prefix", "fgpkg$$"]
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
key_file = "beta.key"
TOML
out=$(/usr/bin/fedgated --check --config "$conf_dir/fedgate.toml" 2>&1) &&
    [[ $out == *"ok: party alpha (id 1), 2 ports, 1 peers"* && $out != *warning* ]] &&
    ok "fedgated --check: the config with its key file loads, no warning" || fail "fedgated --check: $out"

if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
    # The packaged unit, pointed at this config by a drop-in (no hugepages to reserve).
    dropin=/run/systemd/system/fedgated.service.d
    systemd_files=("$dropin" "$conf_dir")
    mkdir -p "$dropin"
    printf '[Service]\nEnvironment=FEDGATE_CONFIG=%s FEDGATE_HUGEPAGES=0\n' "$conf_dir/fedgate.toml" >"$dropin/pkgtest.conf"
    systemctl daemon-reload
    if systemctl start fedgated.service; then
        ok "systemctl start fedgated"
    else
        fail "systemctl start fedgated: $(journalctl -u fedgated --no-pager -n 20 2>&1)"
    fi
else
    # No systemd here: the daemon as the unit's ExecStart would run it.
    /usr/bin/fedgated --config "$conf_dir/fedgate.toml" >"$WORK/daemon.log" 2>&1 &
    daemon_pid=$!
    ok "no systemd as PID 1: fedgated started directly (pid $daemon_pid)"
fi
up=0
for _ in $(seq 1 100); do
    if out=$(fedgatectl --socket "$socket" status 2>&1) && [[ $out == *alpha* ]]; then up=1 && break; fi
    [[ -n $daemon_pid ]] && ! kill -0 "$daemon_pid" 2>/dev/null && break
    sleep 0.2
done
((up)) && ok "the installed fedgatectl reaches the installed fedgated: status names party alpha" ||
    fail "fedgated did not answer: $out $(cat "$WORK/daemon.log" 2>/dev/null)"
if [[ -n $daemon_pid ]]; then
    kill -TERM "$daemon_pid"
    rc=0
    wait "$daemon_pid" || rc=$?
    daemon_pid=""
    [[ $rc == 0 ]] && ok "fedgated stops on SIGTERM with 0" || fail "fedgated exited $rc on SIGTERM: $(tail -5 "$WORK/daemon.log")"
else
    systemctl stop fedgated.service && ok "systemctl stop fedgated" || fail "systemctl stop fedgated"
    remove_systemd_files
fi

# ---- remove them again -------------------------------------------------------------------------------
if DEBIAN_FRONTEND=noninteractive apt-get remove --purge -y -qq "${PACKAGES[@]}" >"$WORK/purge.log" 2>&1; then
    installed=0
    left=$(ls -d /usr/bin/fedgated /usr/bin/fedgatectl /usr/bin/fedgate-node /lib/systemd/system/fedgated.service \
        /usr/share/bash-completion/completions/fedgatectl 2>/dev/null || true)
    [[ -z $left ]] && ok "apt-get remove --purge leaves none of their files" || fail "left after purge: $left"
else
    cat "$WORK/purge.log"
    fail "apt-get remove --purge"
fi

if ((failures)); then
    echo "$failures checks failed"
    exit 1
fi
echo "all checks passed"
