#!/bin/sh
# quickstart.sh: the main command of README.md. Installs what is missing, builds,
# checks the kernels and the transport on 4 local ranks (2 emulated nodes x 2),
# then trains a tiny model on 4 ranks with examples/quickstart.ini: associative
# recall, evaluated on held-out queries whose pair other ranks hold. Exits
# non-zero when anything fails, the accuracy below 90% included.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
sh "$src/build-aux/install-deps.sh" build
sh "$src/build-aux/build.sh"
build=${BURST_BUILD_DIR:-_build}
case "$build" in /*) ;; *) build="$src/$build" ;; esac
"$build/burst" run -n 4 --nodes 2 -- "$build/burst" selftest
cd "$build"
exec "$build/burst" run -n 4 --nodes 2 -- "$build/burst" train --config "$src/examples/quickstart.ini"
