#!/usr/bin/env bash
# The service and its install: `cmake --install` into a DESTDIR lays out exactly the expected files;
# the unit passes `systemd-analyze verify` (against the installed binaries and man pages, and a
# broken copy of it fails); the hugepages helper reserves, never lowers, mounts, and does nothing for
# 0; the example config loads; the man pages render without warnings and name every command and
# option the programs' help shows.
# usage: service.sh BUILD_DIR      (root, for the helper's mount namespace; exit 77: skipped)
# ok and fail always succeed, so "test && ok || fail" is an if-else; single quotes are for inner shells.
# shellcheck disable=SC2015,SC2016
set -euo pipefail
BUILD=$(realpath "${1:?usage: service.sh BUILD_DIR}")
SRC=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../..")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0 skipped=()
ok() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
skip() { echo "skip - $*"; skipped+=("$1"); }
# expect WHAT WANT_RC WANT_TEXT -- CMD...: CMD exits WANT_RC and prints WANT_TEXT (stdout or stderr).
expect() {
    local what=$1 want_rc=$2 want=$3 rc=0 out
    shift 4
    out=$("$@" 2>&1) || rc=$?
    if [[ $rc == "$want_rc" && $out == *"$want"* ]]; then ok "$what"; else fail "$what: rc $rc (want $want_rc), output: $out"; fi
}

# ---- install into a DESTDIR ------------------------------------------------------------------------
unit_setting=$(sed -n 's/^FEDGATE_SYSTEMD_UNIT_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
[[ -n $unit_setting ]] || { fail "FEDGATE_SYSTEMD_UNIT_DIR is not in $BUILD/CMakeCache.txt"; exit 1; }
unit_dir_for() { [[ $unit_setting == /* ]] && echo "$unit_setting" || echo "$1/$unit_setting"; }  # PREFIX
unit_dir=$(unit_dir_for /usr)
D=$WORK/root
if ! DESTDIR=$D cmake --install "$BUILD" --prefix /usr >"$WORK/install.log" 2>&1; then
    cat "$WORK/install.log"
    fail "cmake --install $BUILD --prefix /usr (DESTDIR $D)"
    exit 1
fi
ok "cmake --install --prefix /usr into a DESTDIR"

unit=$unit_dir/fedgated.service
helper=/usr/libexec/fedgate/fedgate-hugepages
example=/etc/fedgate/fedgate.toml.example
executables=(/usr/bin/fedgated /usr/bin/fedgatectl /usr/bin/fedgate-node "$helper")
readable=("$unit" "$example" /usr/share/man/man8/fedgated.8 /usr/share/man/man8/fedgatectl.8
    /usr/share/man/man1/fedgate-node.1 /usr/share/bash-completion/completions/fedgatectl
    /usr/share/bash-completion/completions/fedgate-node)
for f in "${executables[@]}"; do
    [[ -f $D$f && -x $D$f ]] && ok "installed, executable: $f" || fail "missing or not executable: $f"
done
for f in "${readable[@]}"; do
    if [[ -f $D$f && ! -x $D$f && $(stat -c %a "$D$f") == 644 ]]; then ok "installed, mode 644: $f"; else fail "missing or wrong mode: $f"; fi
done
# The client library for compute nodes: the shared library (its symlinks are not files), headers,
# the wire headers they include, fedgate-client.pc and the CMake package (tests/integration/
# client_install.sh builds programs against them).
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
client=(/usr/$libdir/libfedgate-client.so.$version /usr/$libdir/pkgconfig/fedgate-client.pc
    /usr/include/fedgate/{connection,endpoint,error,rdma}.hpp /usr/include/fedgate/fedgate.h
    /usr/include/fedgate/proto/{conn_wire,resolve_wire}.hpp
    /usr/$libdir/cmake/fedgate/fedgate-{config,config-version,targets}.cmake)
targets_cfg=$(cd "$D" && find "usr/$libdir/cmake/fedgate" -name 'fedgate-targets-*.cmake' | sed 's|^|/|')
[[ -n $targets_cfg ]] && ok "the CMake package has its per-configuration targets file" || fail "no fedgate-targets-<config>.cmake"
[[ -L $D/usr/$libdir/libfedgate-client.so.${version%%.*} && $(readlink "$D/usr/$libdir/libfedgate-client.so.${version%%.*}") == libfedgate-client.so.$version ]] &&
    ok "libfedgate-client.so.${version%%.*} (the SONAME) links to the versioned library" || fail "the SONAME link is missing or wrong"
# The Python module (client/python/), under FEDGATE_PYTHON_DIR when the build has one.
pydir=$(sed -n 's/^FEDGATE_PYTHON_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
[[ -z $pydir || $pydir == /* ]] || pydir=/usr/$pydir
python_module=$([[ -n $pydir && -d $D$pydir ]] && cd "$D" && find ".$pydir" -name 'fedgate.*.so' | sed 's|^\.||' || true)
[[ -z $pydir || -n $python_module ]] && ok "the Python module is installed (${python_module:-none in this build})" ||
    fail "no Python module under $pydir"
want=$(printf '%s\n' "${executables[@]}" "${readable[@]}" "${client[@]}" $targets_cfg $python_module | sort)
got=$(cd "$D" && find . -type f | sed 's|^\.||' | sort)
[[ $got == "$want" ]] && ok "nothing else installed" || fail "installed files differ: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
expect "the installed fedgated runs" 0 "fedgated " -- "$D/usr/bin/fedgated" --version

# The unit names the final paths, and the defaults fedgatectl relies on.
u=$D$unit
grep -q '@[A-Z_]*@' "$u" && fail "the unit has unreplaced @VARIABLES@: $(grep -o '@[A-Z_]*@' "$u" | tr '\n' ' ')" ||
    ok "the unit is fully configured"
for line in "Type=notify" "NotifyAccess=main" "WatchdogSec=10s" "ExecStartPre=/usr/bin/fedgated --config \${FEDGATE_CONFIG} --check" \
    "ExecStartPre=+$helper" "ExecStart=/usr/bin/fedgated --config \${FEDGATE_CONFIG}" \
    "Environment=FEDGATE_CONFIG=/etc/fedgate/fedgate.toml" "EnvironmentFile=-/etc/default/fedgate" \
    "EnvironmentFile=-/etc/fedgate/fedgate.env" "Restart=on-failure" "KillSignal=SIGTERM" \
    "LimitMEMLOCK=infinity" "RuntimeDirectory=fedgate" "StateDirectory=fedgate"; do
    grep -qxF -- "$line" "$u" && ok "unit: $line" || fail "unit lacks the line: $line"
done
grep -q '^PrivateDevices=\|^DeviceAllow=\|^ProtectClock=\|^ProtectKernelTunables=' "$u" &&
    fail "unit hides devices or /sys from DPDK" || ok "unit leaves DPDK its devices and /sys"
# fedgatectl's default socket is where the unit's RuntimeDirectory puts it; the same for state_dir.
sock=$(sed -n 's/.*kDefaultSocket = "\(.*\)";.*/\1/p' "$SRC/controlplane/config.hpp")
state=$(sed -n 's/.*kDefaultStateDir = "\(.*\)";.*/\1/p' "$SRC/controlplane/config.hpp")
[[ $sock == /run/fedgate/* ]] && ok "kDefaultSocket ($sock) is in the unit's RuntimeDirectory" ||
    fail "kDefaultSocket '$sock' is not under /run/fedgate (RuntimeDirectory=fedgate)"
[[ $state == /var/lib/fedgate ]] && ok "kDefaultStateDir ($state) is the unit's StateDirectory" ||
    fail "kDefaultStateDir '$state' is not /var/lib/fedgate (StateDirectory=fedgate)"
grep -q "^socket = \"$sock\"" "$D$example" && grep -q "^state_dir = \"$state\"" "$D$example" &&
    ok "the example config keeps the default socket and state_dir" || fail "the example config moves the socket or state_dir"

# The prefix given at install time decides every path, /etc included.
if DESTDIR=$WORK/local cmake --install "$BUILD" --prefix /usr/local >"$WORK/install-local.log" 2>&1; then
    lu=$WORK/local$(unit_dir_for /usr/local)/fedgated.service
    if [[ -f $lu && -f $WORK/local/usr/local/etc/fedgate/fedgate.toml.example ]] &&
        grep -qxF 'ExecStart=/usr/local/bin/fedgated --config ${FEDGATE_CONFIG}' "$lu" &&
        grep -qxF 'Environment=FEDGATE_CONFIG=/usr/local/etc/fedgate/fedgate.toml' "$lu" &&
        grep -qxF 'ExecStartPre=+/usr/local/libexec/fedgate/fedgate-hugepages' "$lu"; then
        ok "--prefix /usr/local: the unit and the config directory follow it"
    else
        fail "--prefix /usr/local: unit or example config not where or what they should be"
    fi
else
    cat "$WORK/install-local.log"
    fail "cmake --install --prefix /usr/local"
fi

# ---- systemd-analyze verify ------------------------------------------------------------------------
# verify exits 0 even for unknown keys and bad values (it only warns), so any output fails too. It
# checks that the Exec binaries exist and that man finds each Documentation= page: a copy of the unit
# points its Exec lines into the DESTDIR, and MANPATH at its man pages.
verify() { # verify UNIT_FILE: prints what systemd-analyze said; fails if it said anything or failed
    local out rc=0
    out=$(cd "$(dirname "$1")" && MANPATH=$D/usr/share/man systemd-analyze verify --man=yes "$1" 2>&1) || rc=$?
    [[ $rc == 0 && -z $out ]] || { echo "rc $rc: $out"; return 1; }
}
if ! command -v systemd-analyze >/dev/null; then
    skip "systemd-analyze" "systemd-analyze is missing (Debian package systemd; tools/deps.sh installs it)"
else
    mkdir -p "$WORK/verify/good" "$WORK/verify/key" "$WORK/verify/exec" "$WORK/verify/doc"
    sed -E "s#^(Exec[A-Za-z]*=[-+@!:]*)/#\1$D/#" "$u" >"$WORK/verify/good/fedgated.service"
    if out=$(verify "$WORK/verify/good/fedgated.service"); then ok "systemd-analyze verify: the installed unit"; else fail "systemd-analyze verify: $out"; fi
    # The same check must catch a typo'd key, a missing binary and a missing man page.
    sed 's/^RestartSec=/RestartSecs=/' "$WORK/verify/good/fedgated.service" >"$WORK/verify/key/fedgated.service"
    sed "s#^ExecStart=$D/usr/bin/fedgated#ExecStart=$D/usr/bin/fedgated-missing#" "$WORK/verify/good/fedgated.service" \
        >"$WORK/verify/exec/fedgated.service"
    sed 's/^Documentation=.*/Documentation=man:fedgate-missing(8)/' "$WORK/verify/good/fedgated.service" \
        >"$WORK/verify/doc/fedgated.service"
    for bad in key:"Unknown key" exec:"fedgated-missing" doc:"fedgate-missing"; do
        dir=${bad%%:*} want=${bad#*:}
        if out=$(verify "$WORK/verify/$dir/fedgated.service"); then
            fail "systemd-analyze verify passed a broken unit ($dir)"
        elif [[ $out == *"$want"* ]]; then
            ok "systemd-analyze verify fails a broken unit ($dir): ${out//$'\n'/ }"
        else
            fail "systemd-analyze verify failed the broken unit ($dir) for another reason: $out"
        fi
    done
fi

# ---- the hugepages helper ----------------------------------------------------------------------------
H=$D$helper
echo 'FEDGATE_HUGEPAGES=0' >"$WORK/zero.env"
expect "helper: FEDGATE_HUGEPAGES=0 (from an env file) touches nothing, exits 0" 0 "nothing reserved" -- \
    env -u FEDGATE_HUGEPAGES "$H" "$WORK/zero.env"
expect "helper: a bad count exits 1, naming it" 1 "FEDGATE_HUGEPAGES='12x'" -- env FEDGATE_HUGEPAGES=12x "$H"
expect "helper: a relative mount point exits 1" 1 "FEDGATE_HUGEPAGES_MOUNT='hp'" -- \
    env FEDGATE_HUGEPAGES=8 FEDGATE_HUGEPAGES_MOUNT=hp "$H"
# The rest writes nr_hugepages and mounts: in a private mount namespace, over a file bound onto
# /proc/sys/vm/nr_hugepages and with no hugetlbfs mounted, so the machine's own are never touched.
in_ns() { # in_ns NR_START ARGS...: runs the helper; prints its output, then "nr=N" and the mounts
    local start=$1
    shift
    echo "$start" >"$WORK/nr_hugepages"
    unshare -m --propagation private bash -c '
        set -e
        mount --bind "$1" /proc/sys/vm/nr_hugepages
        awk "\$3 == \"hugetlbfs\" { print \$2 }" /proc/mounts | xargs -r -n1 umount -l
        shift
        rc=0; "$@" || rc=$?
        echo "rc=$rc nr=$(cat /proc/sys/vm/nr_hugepages)"
        awk "\$3 == \"hugetlbfs\" { print \"mount=\" \$2 }" /proc/mounts' _ "$WORK/nr_hugepages" "$@" 2>&1
}
if [[ $(id -u) != 0 ]] || ! unshare -m --propagation private true 2>/dev/null || ! grep -qw hugetlbfs /proc/filesystems; then
    skip "helper-ns" "helper reservation and mount: needs root, unshare -m and hugetlbfs"
else
    printf '# hugepages for fedgated\n  FEDGATE_HUGEPAGES="16"\nFEDGATE_HUGEPAGES_MOUNT=%s/hp\n' "$WORK" >"$WORK/sixteen.env"
    out=$(in_ns 0 env -u FEDGATE_HUGEPAGES -u FEDGATE_HUGEPAGES_MOUNT "$H" "$WORK/zero.env" "$WORK/sixteen.env") || true
    [[ $out == *"rc=0 nr=16"* && $out == *"mount=$WORK/hp"* ]] &&
        ok "helper: raises 0 to 16 (the later env file wins) and mounts hugetlbfs" || fail "helper raise and mount: $out"
    out=$(in_ns 1024 env FEDGATE_HUGEPAGES=16 FEDGATE_HUGEPAGES_MOUNT="$WORK/hp" "$H") || true
    [[ $out == *"rc=0 nr=1024"* && $out == *"left as is"* ]] && ok "helper: never lowers a reservation (1024 stays)" ||
        fail "helper lowered or failed: $out"
    mkdir -p "$WORK/other"
    out=$(in_ns 0 bash -c 'mount -t hugetlbfs nodev "$1" && FEDGATE_HUGEPAGES=4 FEDGATE_HUGEPAGES_MOUNT="$2" "$3"' _ \
        "$WORK/other" "$WORK/hp" "$H") || true
    [[ $out == *"rc=0 nr=4"* && $out == *"is mounted on $WORK/other"* && $out != *"mount=$WORK/hp"* ]] &&
        ok "helper: an existing hugetlbfs mount is used, no second one" || fail "helper mounted twice: $out"
fi
grep -qF "$WORK" /proc/mounts && fail "a test mount leaked out of its namespace" || true

# ---- the example config ------------------------------------------------------------------------------
F=$D/usr/bin/fedgated
# As shipped, its key is the one printed in the docs: refused. With a key of one's own it loads, and
# an inline key is warned about.
expect "the example config's published key is refused" 1 "peer[0].key: is the example key printed in fedgate's documentation" -- \
    "$F" --check --config "$D$example"
OWN_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d " \n")
sed -e "s/^key = \".*\"/key = \"$OWN_KEY\"/" "$D$example" >"$WORK/example.toml"
expect "the example config loads with a key of its own" 0 "example.toml: ok: party alpha (id 1), 2 ports, 1 peers" -- \
    "$F" --check --config "$WORK/example.toml"
expect "an inline key is warned about" 0 "warning: $WORK/example.toml: peer[0].key: the key is inline" -- \
    "$F" --check --config "$WORK/example.toml"
# The key in a file beside the config: refused while others may read it, loaded at 0600, no warning.
echo "$OWN_KEY" >"$WORK/beta.key"
chmod 644 "$WORK/beta.key"
sed -e 's/^key = ".*"/key_file = "beta.key"/' "$D$example" >"$WORK/keyfile.toml"
expect "a key file others may read is refused, naming it and its mode" 1 \
    "peer[0].key_file: $WORK/beta.key has mode 0644" -- "$F" --check --config "$WORK/keyfile.toml"
chmod 600 "$WORK/beta.key"
expect "a key file at 0600 loads" 0 "ok: party alpha" -- "$F" --check --config "$WORK/keyfile.toml"
out=$("$F" --check --config "$WORK/keyfile.toml" 2>&1) || true
[[ $out != *warning* ]] && ok "a key file gets no warning" || fail "warned about a key file: $out"
# Its commented alternatives load too.
sed -e 's/^# static_neighbours = /static_neighbours = /' \
    -e 's/^args = .*//' -e 's/^#   args = /args = /' "$WORK/example.toml" >"$WORK/alternatives.toml"
grep -q '^static_neighbours = ' "$WORK/alternatives.toml" && grep -q '^args = \[.*--no-huge' "$WORK/alternatives.toml" ||
    fail "the example's commented static_neighbours or --no-huge args line is gone"
expect "the example's commented alternatives load" 0 "ok: party alpha" -- "$F" --check --config "$WORK/alternatives.toml"

# ---- man pages ---------------------------------------------------------------------------------------
M=$D/usr/share/man
pages=("$M/man8/fedgated.8" "$M/man8/fedgatectl.8" "$M/man1/fedgate-node.1")
if command -v groff >/dev/null; then
    for p in "${pages[@]}"; do
        out=$(groff -man -Tutf8 -ww -z "$p" 2>&1)
        [[ -z $out ]] && ok "groff -man -ww: $(basename "$p") renders without warnings" || fail "groff warns on $(basename "$p"): $out"
        if command -v man >/dev/null; then
            out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)
            [[ -z $out ]] && ok "man --warnings -l: $(basename "$p")" || fail "man warns on $(basename "$p"): $out"
        fi
    done
    # Plain text, one line per paragraph and no hyphenation, so names are found whole.
    text() { groff -man -Tascii -rLL=5000n -rHY=0 -P-c -P-b -P-o -P-u "$1" 2>/dev/null; }
    # commands_of PROGRAM: the command names under "commands:" in its help (words before the operands).
    commands_of() {
        "$1" help | awk '/^commands:/ { on = 1; next } on && /^$/ { exit }
            on { sub(/^  /, ""); split($0, cols, "  "); n = split(cols[1], w, " "); name = ""
                 for (i = 1; i <= n && w[i] ~ /^[a-z][a-z-]*$/; i++) name = name (name == "" ? "" : " ") w[i]
                 print name }'
    }
    # described PAGE_TEXT OPTION: OPTION begins a line (an OPTIONS entry: "--tries N", "-h, --help").
    described() { grep -qE -- "^ +(-[a-z], )?$2([ ,]|$)" <<<"$1"; }
    # check_page PROGRAM PAGE: each command begins a line of the page; each option in each command's
    # usage line appears in it; each global option of the program's help is described.
    check_page() {
        local prog=$1 page=$2 name cmds page_text opts missing=() n=0
        page_text=$(text "$page")
        mapfile -t cmds < <(commands_of "$prog")
        ((${#cmds[@]} >= 3)) || { fail "$(basename "$prog") help lists ${#cmds[@]} commands"; return; }
        for name in "${cmds[@]}"; do
            n=$((n + 1))
            grep -qE "^ +${name}( |$)" <<<"$page_text" || missing+=("command '$name'")
            opts=$("$prog" help "$name" | head -1 | grep -oE -- '--[a-z][a-z-]*' || true)
            for o in $opts; do
                grep -qE -- "(^|[^a-z-])${o}([^a-z-]|$)" <<<"$page_text" || missing+=("option $o of '$name'")
            done
        done
        for o in $("$prog" --help | grep -oE -- '^ +(-[a-z] \[ )?--[a-z][a-z-]*' | grep -oE -- '--[a-z-]+'); do
            described "$page_text" "$o" || missing+=("global option $o")
        done
        if ((${#missing[@]})); then
            fail "$(basename "$page") lacks: ${missing[*]}"
        else
            ok "$(basename "$page") names all $n commands of '$(basename "$prog") help' and their options"
        fi
    }
    check_page "$D/usr/bin/fedgatectl" "$M/man8/fedgatectl.8"
    check_page "$D/usr/bin/fedgate-node" "$M/man1/fedgate-node.1"
    missing=()
    for o in $("$F" --help | grep -oE -- '^ +--[a-z][a-z-]*'); do
        described "$(text "$M/man8/fedgated.8")" "$o" || missing+=("$o")
    done
    ((${#missing[@]} == 0)) && ok "fedgated.8 describes every option of 'fedgated --help'" || fail "fedgated.8 lacks ${missing[*]}"
    # The section headings a reader expects, in each page.
    for p in "${pages[@]}"; do
        for s in NAME SYNOPSIS OPTIONS "EXIT STATUS" FILES "SEE ALSO"; do
            grep -qx "$s" <<<"$(text "$p")" || fail "$(basename "$p") has no $s section"
        done
    done
else
    skip "man pages" "groff is missing (Debian package groff-base; tools/deps.sh installs it)"
fi

if ((failures)); then
    echo "$failures checks failed"
    exit 1
fi
if ((${#skipped[@]})); then
    echo "skipped: ${skipped[*]}; everything else passed"
    exit 77
fi
echo "all checks passed"
