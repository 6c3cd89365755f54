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
for log in tests/*.log; do
    [ -f "$log" ] || continue
    grep -h -E '^[0-9]+%: Checks:' "$log" | sed "s|^|$(basename "$log" .log): |" || true
done
for trs in tests/*.trs; do
    [ -f "$trs" ] || continue
    case "$(sed -n 's/^:test-result: //p' "$trs")" in
    PASS | SKIP | XFAIL) passed=$((passed + 1)) ;;
    *) failed=$((failed + 1)); echo "FAILED: $(basename "$trs" .trs) (see $build/${trs%.trs}.log)" ;;
    esac
done
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
