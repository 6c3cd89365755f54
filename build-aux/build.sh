#!/bin/sh
# build.sh: generates configure when needed, configures an out-of-tree build
# directory when its flags changed, and builds. Safe to re-run.
#   BURST_BUILD_DIR        build directory (default: _build)
#   BURST_CONFIGURE_FLAGS  flags for ./configure (default: --enable-werror)
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BURST_BUILD_DIR:-_build}
flags=${BURST_CONFIGURE_FLAGS:---enable-werror}
case "$build" in /*) ;; *) build="$src/$build" ;; esac

cd "$src"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    echo "== autogen"
    ./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || [ "$(cat .configure-flags 2>/dev/null)" != "$flags" ] ||
    [ "$src/configure" -nt Makefile ]; then
    echo "== configure $flags"
    # shellcheck disable=SC2086
    "$src/configure" $flags
    echo "$flags" >.configure-flags
fi
echo "== make"
make -j"$(nproc)"
