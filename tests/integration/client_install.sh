#!/usr/bin/env bash
# The client library as a framework's build sees it: `cmake --install` into a prefix of its own, then
# tests/install/client_demo.cpp built against the installed copy twice, once with pkg-config
# (fedgate-client.pc) and once with CMake (find_package(fedgate)), each run with only the installed
# library on the loader path; both must print what the library computes. Nothing from the source
# tree is on the include path. Then Debian's python3 imports the installed Python module from the
# prefix's dist-packages. Cleans up on any exit.
# usage: client_install.sh BUILD_DIR
set -euo pipefail
BUILD=$(realpath "${1:?usage: client_install.sh BUILD_DIR}")
SRC=$(cd "$(dirname "$0")/../install" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILURES=0
ok() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILURES=$((FAILURES + 1)); }

PREFIX=$WORK/prefix
cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; fail "cmake --install"; exit 1; }
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
WANT="pid 2.7.42 party 2 record round-trips transport auto stage transport error \"stage resolve: 2.7.42: not_found\""
# A program linking the sanitizer build's library is built with the same sanitizers.
SAN=""
grep -q 'FEDGATE_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && SAN="-fsanitize=address,undefined"
run() { env LD_LIBRARY_PATH="$PREFIX/$libdir" ASAN_OPTIONS=detect_leaks=0 "$@"; }

# --- what is public: the API's headers, none of the library's private ones (pimpl) ---
public=$(cd "$PREFIX/include/fedgate" && ls *.h *.hpp | sort | tr '\n' ' ')
[[ $public == "connection.hpp endpoint.hpp error.hpp fedgate.h rdma.hpp " ]] &&
    ok "the public headers are installed, the private ones are not ($public)" || fail "installed headers: $public"
if ! grep -q "std::mutex\|std::thread\|std::condition_variable" "$PREFIX/include/fedgate/endpoint.hpp" &&
    grep -q "std::unique_ptr<Impl> impl_" "$PREFIX/include/fedgate/endpoint.hpp"; then
    ok "Endpoint's state is behind its Impl"
else
    fail "endpoint.hpp shows Endpoint's private state"
fi

# --- pkg-config ---
export PKG_CONFIG_PATH=$PREFIX/$libdir/pkgconfig
if flags=$(pkg-config --cflags --libs fedgate-client) &&
    g++ -std=c++20 $SAN -o "$WORK/demo-pc" "$SRC/client_demo.cpp" $flags 2>"$WORK/pc.log"; then
    ok "built against the installed copy with pkg-config ($flags)"
else
    cat "$WORK/pc.log" 2>/dev/null || true
    fail "build with pkg-config"
fi
[[ $(pkg-config --modversion fedgate-client) == "$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD/CMakeCache.txt")" ]] &&
    ok "fedgate-client.pc has the project's version" || fail "fedgate-client.pc version"
if [[ -x $WORK/demo-pc ]]; then
    out=$(run "$WORK/demo-pc" 2>&1) || true
    [[ $out == "$WANT" ]] && ok "the pkg-config build runs on the installed library" || fail "pkg-config build printed: $out"
    # ldd's whole output first: with pipefail, `ldd | grep -q` fails when grep stops reading early.
    loads=$(LD_LIBRARY_PATH="$PREFIX/$libdir" ldd "$WORK/demo-pc")
    [[ $loads == *"libfedgate-client.so.0 => $PREFIX/"* ]] &&
        ok "it loads libfedgate-client.so.0 (the SONAME) from the prefix" || fail "the SONAME is not what the program loads"
fi

# --- C, with pkg-config ---
if gcc -std=c11 -Wall -Wextra -Werror $SAN -o "$WORK/demo-c" "$SRC/c_demo.c" $(pkg-config --cflags --libs fedgate-client) \
    2>"$WORK/c.log"; then
    ok "the C API (fedgate/fedgate.h) compiles as C11 and links"
    out=$(run "$WORK/demo-c" 2>&1) || true
    [[ $out == "refused open | stage open: gateway 'not-an-address' is not IP or IP:PORT" ]] &&
        ok "the C program's error names the stage and the bad input" || fail "C program printed: $out"
else
    cat "$WORK/c.log"
    fail "build the C program"
fi

# --- CMake ---
if cmake -S "$SRC" -B "$WORK/cmake-build" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_CXX_FLAGS="$SAN" >"$WORK/cmake.log" 2>&1 &&
    cmake --build "$WORK/cmake-build" >>"$WORK/cmake.log" 2>&1; then
    ok "built against the installed copy with find_package(fedgate)"
    out=$(run "$WORK/cmake-build/client_demo" 2>&1) || true
    [[ $out == "$WANT" ]] && ok "the CMake build runs on the installed library" || fail "CMake build printed: $out"
else
    cat "$WORK/cmake.log"
    fail "build with find_package(fedgate)"
fi
# --- Python: Debian's python3 imports the installed module (client/python/) from the prefix ---
pydir=$(sed -n 's/^FEDGATE_PYTHON_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
if [[ -z $pydir ]]; then
    echo "skip - the Python module: this build has none (no pybind11: Debian package pybind11-dev)"
else
    [[ $pydir == /* ]] || pydir=$PREFIX/$pydir
    # Not LD_LIBRARY_PATH: the module carries the library in itself. A sanitizer build's module needs
    # the ASan runtime loaded first and libstdc++ next (see tests/unit/python.part.cmake).
    pyenv=(PYTHONPATH="$pydir")
    [[ -n $SAN ]] && pyenv+=(LD_PRELOAD="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libstdc++.so)"
        ASAN_OPTIONS=detect_leaks=0)
    if out=$(cd "$WORK" && env "${pyenv[@]}" /usr/bin/python3 -c '
import pydoc, fedgate
print(fedgate.__file__)
print(pydoc.render_doc(fedgate, renderer=pydoc.plaintext))
try:
    fedgate.Endpoint("127.0.0.1", "1.7")
except ValueError as e:
    print("ValueError:", e)' 2>&1); then
        file=$(head -n 1 <<<"$out")
        [[ $file == "$pydir"/fedgate.*.so ]] && ok "/usr/bin/python3 imports the installed module ($file)" ||
            fail "python3 imported fedgate from $file, not from $pydir"
        grep -q 'Endpoint(gateway, pid, transport="auto", bind=None)' <<<"$out" &&
            grep -q 'The next incoming Connection, waiting up to .timeout. seconds' <<<"$out" &&
            ok "help(fedgate) has the Endpoint docs" || fail "help(fedgate) lacks the Endpoint docs: ${out:0:600}"
        grep -q "ValueError: pid '1.7' is not a process ID" <<<"$out" &&
            ok "the installed module runs: a bad pid is a ValueError naming it" || fail "bad pid: $(tail -n 1 <<<"$out")"
        loads=$(ldd "$file")
        [[ $loads != *libfedgate-client* ]] && ok "the module needs no libfedgate-client.so" ||
            fail "the module links libfedgate-client.so: $(ldd "$file" | grep libfedgate-client)"
    else
        echo "$out"
        fail "/usr/bin/python3 cannot import the installed module with PYTHONPATH=$pydir"
    fi
fi
echo
((FAILURES == 0)) && echo "client_install: all checks passed" || { echo "client_install: $FAILURES check(s) failed"; exit 1; }
