#!/bin/sh
# test_configure.sh: configure stops with the Debian package to install when a
# required dependency is missing (here UCX, hidden from pkg-config).
set -u
src=${BURST_TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/pc"
# every .pc file pkg-config knows, except UCX's
for dir in $(pkg-config --variable pc_path pkg-config | tr ':' ' '); do
    [ -d "$dir" ] && for f in "$dir"/*.pc; do
        case "$(basename "$f")" in ucx*) ;; *) [ -f "$f" ] && cp "$f" "$work/pc/" ;; esac
    done
done
cd "$work"
out=$(PKG_CONFIG_LIBDIR="$work/pc" "$src/configure" --without-cuda 2>&1)
code=$?
if [ $code -ne 0 ] && printf '%s\n' "$out" | grep -q "install the Debian package libucx-dev"; then
    echo "PASS: configure without UCX names libucx-dev"
    echo "1 passed, 0 failed"
    exit 0
fi
echo "FAIL: configure without UCX exited $code:"
printf '%s\n' "$out" | tail -5
echo "0 passed, 1 failed"
exit 1
