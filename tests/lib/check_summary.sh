#!/bin/sh
# check_summary.sh BUILD_DIR: the summary of a `make check` run in BUILD_DIR
# (tests/run.sh prints it): each suite's "Checks:" line, the failed tests, and a
# final "N passed, N failed, N skipped" line naming the skipped tests. A skip
# (exit 77) is not a pass, but it fails the run only for a test that CI must run
# when CI=true: the real-Slurm test, whose packages build-aux/install-deps.sh
# test installs (tests that need a GPU skip on machines without one, in CI too).
# Exit 0 when nothing failed, 1 otherwise.
set -u
cd "$1" || exit 1
ci_must_run="tests/transport/test_slurm"
passed=0
failed=0
skipped=0
skipped_names=
# One .trs and .log per test, next to it (tests/attn/test_ring.trs ...): the
# list comes from the Makefile, so results of tests no longer listed do not count.
# (Called from a make, the settings of that make must not reach this one.)
results=$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s list-test-results) ||
    exit 1
for trs in $results; do
    log=${trs%.trs}.log
    [ -f "$log" ] || continue
    name=${trs#tests/}
    grep -h -E '^[0-9]+%: Checks:' "$log" | sed "s|^|${name%.trs}: |"
done
for trs in $results; do
    test=${trs%.trs}
    case "$(sed -n 's/^:test-result: //p' "$trs" 2>/dev/null)" in
    PASS | XFAIL) passed=$((passed + 1)) ;;
    SKIP)
        skipped=$((skipped + 1))
        skipped_names="$skipped_names ${test#tests/}"
        case " $ci_must_run " in *" $test "*)
            if [ "${CI:-}" = true ]; then
                failed=$((failed + 1))
                echo "FAILED: $test was skipped, and CI must run it (see $1/$test.log)"
            fi ;;
        esac ;;
    *) failed=$((failed + 1)); echo "FAILED: $test (see $1/$test.log)" ;;
    esac
done
echo "$passed passed, $failed failed, $skipped skipped${skipped_names:+ (skipped:$skipped_names)}"
[ "$failed" -eq 0 ]
