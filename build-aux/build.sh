#!/bin/sh
# build.sh: generates configure when needed, configures an out-of-tree build
# directory when its flags changed or a program configure looks for appeared
# or went since (build-aux/tool-paths.sh: e.g. cuobjdump, installed by
# install-deps.sh test after a build), and builds. Safe to re-run.
#   BURST_BUILD_DIR        build directory (default: _build)
#   BURST_CONFIGURE_FLAGS  flags for ./configure (default: --enable-werror)
#   BURST_CUDA_TOOLS       as for build-aux/install-deps.sh
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=build-aux/tool-paths.sh
. "$src/build-aux/tool-paths.sh"
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
# what the last configure ran with: its flags, and the programs it could find
state=$(printf 'flags: %s\n%s\n' "$flags" "$(burst_tool_state)")
if [ ! -f Makefile ] || [ "$(cat .configure-state 2>/dev/null)" != "$state" ] ||
    [ "$src/configure" -nt Makefile ]; then
    if [ -f .configure-state ] && [ "$(sed -n 1p .configure-state)" = "flags: $flags" ]; then
        echo "== configure again: the programs it looks for changed"
    fi
    echo "== configure $flags"
    rm -f .configure-state
    # shellcheck disable=SC2086
    "$src/configure" $flags
    printf '%s\n' "$state" >.configure-state
fi
echo "== make"
make -j"$(nproc)"
