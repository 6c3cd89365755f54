#!/bin/sh
# test_cuda_resources.sh: the resources of every CUDA kernel, as ptxas reported
# them when the kernels were built (-Xptxas -v, gathered in
# kernels/cuda/resource-usage.txt), against budgets:
#   - every kernel: no spill stores or loads;
#   - the attention kernels (bk_attn_fwd_kernel, bk_attn_bwd_dkdv_kernel,
#     bk_attn_bwd_dq_kernel): no stack frame (no local memory), at most 255
#     registers, at most 4 KiB of static shared memory (their tiles are
#     dynamic), and all 4 instances (head dim 64 and 128, fp32 and bf16
#     inputs) of each, for sm_80 and for sm_90;
#   - the other kernels: no stack frame, at most 64 registers.
# Prints the table. Skips (exit 77) when the build has no CUDA.
build=${BURST_TEST_BUILDDIR:-.}
if ! grep -q '^#define HAVE_CUDA 1' "$build/config.h" 2>/dev/null; then
    echo "SKIP: this build has no CUDA (configure --with-cuda)"
    exit 77
fi
report=$build/kernels/cuda/resource-usage.txt
if [ ! -s "$report" ]; then
    echo "FAIL: $report is missing or empty (make builds it with the CUDA kernels)"
    exit 1
fi

awk '
function short(m,   n, rest, d, t) {   # _Z18bk_attn_fwd_kernelILi128EfE... -> bk_attn_fwd_kernel<128,f32>
    if (m !~ /^_Z[0-9]+/) return m
    n = m; sub(/^_Z/, "", n); n = n + 0
    rest = substr(m, 3 + length(n "") + n)
    m = substr(m, 3 + length(n ""), n)
    if (rest ~ /^ILi[0-9]+E[ft]E/) {
        d = rest; sub(/^ILi/, "", d); sub(/E.*/, "", d)
        t = substr(rest, 5 + length(d), 1) == "f" ? "f32" : "bf16"
        m = m "<" d "," t ">"
    }
    return m
}
/Compiling entry function/ {
    split($0, q, "'\''"); name = q[2]; arch = q[4]; key = short(name) " " arch
    keys[++n] = key; want = 0; next
}
/Function properties for/ { want = ($NF == name); next }
/bytes stack frame/ && want { stack[key] = $1; spst[key] = $5; spld[key] = $9; want = 0; next }
/Used [0-9]+ registers/ {
    line = $0; sub(/.*Used /, "", line); regs[key] = line + 0
    sm = 0; if (match($0, /[0-9]+ bytes smem/)) sm = substr($0, RSTART, RLENGTH) + 0
    smem[key] = sm
}
END {
    bad = 0
    printf "%-40s %-6s %5s %6s %6s %6s %6s  %s\n", "kernel", "arch", "regs", "stack", "spst", "spld", "smem", "budget"
    for (i = 1; i <= n; i++) {
        k = keys[i]; split(k, f, " ")
        attn = f[1] ~ /^bk_attn_(fwd|bwd_dkdv|bwd_dq)_kernel</
        maxr = attn ? 255 : 64; maxs = attn ? 4096 : 49152
        ok = spst[k] == 0 && spld[k] == 0 && stack[k] == 0 && regs[k] <= maxr && smem[k] <= maxs
        printf "%-40s %-6s %5d %6d %6d %6d %6d  %s\n", f[1], f[2], regs[k], stack[k], spst[k], spld[k], smem[k], ok ? "ok" : "OVER BUDGET"
        if (!ok) bad++
        if (attn) seen[k] = 1
    }
    split("bk_attn_fwd_kernel bk_attn_bwd_dkdv_kernel bk_attn_bwd_dq_kernel", ks, " ")
    split("64,f32 64,bf16 128,f32 128,bf16", inst, " ")
    split("sm_80 sm_90", archs, " ")
    for (a in ks) for (b in inst) for (c in archs) {
        k = ks[a] "<" inst[b] "> " archs[c]
        if (!(k in seen)) { print "MISSING: " k; bad++ }
    }
    if (bad) { print bad " problem(s)"; exit 1 }
    print "every kernel within budget"
}' "$report"
