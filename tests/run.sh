#!/bin/sh
# run.sh: the test command of README.md. Installs what is missing, builds, runs
# `make check`, prints each suite's summary and a final "N passed, N failed" line.
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
passed=0
failed=0
# One .trs and .log per test, next to it (tests/attn/test_ring.trs ...): the
# list comes from the Makefile, so results of tests no longer listed do not count.
results=$(make --no-print-directory -s list-test-results)
for trs in $results; do
    log=${trs%.trs}.log
    [ -f "$log" ] || continue
    name=${trs#tests/}
    grep -h -E '^[0-9]+%: Checks:' "$log" | sed "s|^|${name%.trs}: |" || true
done
for trs in $results; do
    case "$(sed -n 's/^:test-result: //p' "$trs" 2>/dev/null)" in
    PASS | SKIP | XFAIL) passed=$((passed + 1)) ;;
    *) failed=$((failed + 1)); echo "FAILED: ${trs%.trs} (see $build/${trs%.trs}.log)" ;;
    esac
done
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
