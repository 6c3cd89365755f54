#!/bin/sh
# run.sh: the test command of README.md. Installs what is missing, builds, runs
# `make check`, and prints the summary of tests/lib/check_summary.sh (passed,
# failed, skipped; under CI=true a skipped real-Slurm test fails the run).
#   BURST_BUILD_DIR, BURST_CONFIGURE_FLAGS: as for build-aux/build.sh.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
sh "$src/build-aux/install-deps.sh" test
sh "$src/build-aux/build.sh"
build=${BURST_BUILD_DIR:-_build}
case "$build" in /*) ;; *) build="$src/$build" ;; esac
cd "$build"
status=0
make -j"$(nproc)" check || status=$?
echo "== check summaries"
sh "$src/tests/lib/check_summary.sh" "$build" || status=1
[ "$status" -eq 0 ]
