#!/bin/sh
# test_cuda_sass.sh: the attention kernels run on tensor cores: the SASS of
# every instance of bk_attn_fwd_kernel, bk_attn_bwd_dkdv_kernel and
# bk_attn_bwd_dq_kernel, for sm_80 and for sm_90, contains HMMA instructions
# (cuobjdump -sass of the built objects). Skips (exit 77) when the build has no
# CUDA. A CUDA build without cuobjdump (or the nvdisasm it runs) fails: the
# toolkit has both, and build-aux/install-deps.sh test installs them from PyPI
# where it does not (configure finds them there). cuobjdump is the one
# configure found, else the first in PATH, the toolkit's folder and the
# installer's (build-aux/tool-paths.sh), so that a build configured before the
# installer ran finds it too.
build=${BURST_TEST_BUILDDIR:-.}
src=${BURST_TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! grep -q '^#define HAVE_CUDA 1' "$build/config.h" 2>/dev/null; then
    echo "SKIP: this build has no CUDA (configure --with-cuda)"
    exit 77
fi
# shellcheck source=build-aux/tool-paths.sh
. "$src/build-aux/tool-paths.sh"
tool=${CUOBJDUMP:-$(sed -n 's/^CUOBJDUMP = //p' "$build/Makefile" 2>/dev/null)}
[ -n "$tool" ] || tool=$(burst_tool_find cuobjdump | head -n 1)
if [ -z "$tool" ] || [ ! -x "$tool" ]; then
    echo "FAIL: cuobjdump not found in PATH, /usr/local/cuda/bin or $burst_cuda_tools/bin (run build-aux/install-deps.sh test, or configure CUOBJDUMP=...)"
    exit 1
fi
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
for obj in attention_fwd attention_bwd; do
    if ! "$tool" -sass "$build/kernels/cuda/$obj.o" >>"$sass" 2>&1; then
        if grep -q nvdisasm "$sass"; then
            echo "FAIL: $tool needs nvdisasm beside it (build-aux/install-deps.sh test installs both)"
            exit 1
        fi
        cat "$sass"
        echo "FAIL: $tool -sass $obj.o"
        exit 1
    fi
done
awk '
/^arch = / { arch = $3 }
/Function : / { fn = $3; key = fn " " arch; keys[key] = 1; hmma[key] += 0; next }
/HMMA/ { hmma[key]++ }
END {
    bad = 0; n = 0
    for (k in keys) {
        if (k !~ /bk_attn_(fwd|bwd_dkdv|bwd_dq)_kernel/) continue
        n++
        printf "%-80s %5d HMMA\n", k, hmma[k]
        if (hmma[k] == 0) bad++
    }
    if (n != 24) { print "FAIL: " n " attention kernel instances in the SASS, expected 24 (3 kernels x 4 instances x sm_80, sm_90)"; exit 1 }
    if (bad) { print "FAIL: " bad " attention kernel(s) without HMMA"; exit 1 }
    print "every attention kernel uses tensor cores (HMMA)"
}' "$sass"
