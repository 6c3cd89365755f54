/* simt_mma.cc: per-lane emulation of mma.sync m16n8k16 (bf16 in, fp32
 * accumulate), ldmatrix and cp.async (simt_mma.h).
 *
 * Fragment layouts, from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
 * floating point type"; the same as CUTLASS's SM80_16x8x16 traits), with
 * g = lane / 4 and t = lane % 4; a .b32 register holds two 16-bit elements,
 * the lower-numbered one in its low half:
 *   A, 16 x 16 row-major, 4 registers = elements a0..a7:
 *       a_i: row g + 8 * ((i / 2) % 2), column 2t + (i % 2) + 8 * (i / 4)
 *   B, 16 x 8 (k x n), 2 registers = b0..b3:
 *       b_i: row (k) 2t + (i % 2) + 8 * (i / 2), column (n) g
 *   C and D, 16 x 8 fp32, 4 registers c0..c3:
 *       c_i: row g + 8 * (i / 2), column 2t + (i % 2)
 * ldmatrix m8n8 .b16: lane 8j + r gives the address of row r of matrix j;
 * register j of lane l holds elements (l / 4, 2 (l % 4)) and
 * (l / 4, 2 (l % 4) + 1) of matrix j, or with .trans elements
 * (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).
 *
 * Compiled with -DBK_EMU_MMA_MUTANTS (the layout tests' builds only), the
 * environment's BK_EMU_MMA_MUTANT = 1 .. 5 plants one classic mistake in one
 * table (enum mutant below); the emulator's tests of mma and ldmatrix and the
 * attention kernels' tests must then fail (tests/kernels/test_simt_wrong_layout.sh). */
#include "emu/simt/simt_mma.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "emu/simt/simt_internal.h"
#include "emu/simt/simt_memory.h"

namespace bk_emu
{

/* ---------------------------------------------------------------- layouts */

/* The layout mistakes a mutant build can plant, one per fragment table. */
enum mutant {
    MUTANT_NONE = 0,
    MUTANT_A,              /* A registers 1 and 2 swapped (rows + 8 and columns + 8) */
    MUTANT_B,              /* B: a register's two halves k and k + 8, not k and k + 1 */
    MUTANT_C,              /* C: c1 and c2 swapped (rows + 8 and columns + 1) */
    MUTANT_LDMATRIX,       /* ldmatrix: lane l holds row l % 8, columns 2 (l / 8) + 0, 1 (the
                              order of the lanes giving addresses, not the ISA's) */
    MUTANT_LDMATRIX_TRANS, /* ldmatrix.trans loads as if without .trans */
};

#ifdef BK_EMU_MMA_MUTANTS
static int mutant(void)
{
    static int planted = -1;
    if (planted < 0) {
        const char *env = getenv("BK_EMU_MMA_MUTANT");
        planted = env != NULL ? atoi(env) : MUTANT_NONE;
    }
    return planted;
}
#else
static int mutant(void)
{
    return MUTANT_NONE;
}
#endif

static void a_coord(int lane, int i, int *row, int *col)
{
    int g = lane >> 2, t = lane & 3;
    int row8 = mutant() == MUTANT_A ? i >> 2 : (i >> 1) & 1,
        col8 = mutant() == MUTANT_A ? (i >> 1) & 1 : i >> 2;
    *row = g + 8 * row8;
    *col = 2 * t + (i & 1) + 8 * col8;
}

static void b_coord(int lane, int i, int *k, int *n)
{
    int half = i & 1, pair = i >> 1;
    *k = 2 * (lane & 3) + (mutant() == MUTANT_B ? 8 * half + pair : half + 8 * pair);
    *n = lane >> 2;
}

static void c_coord(int lane, int i, int *row, int *col)
{
    int row8 = mutant() == MUTANT_C ? i & 1 : i >> 1, col1 = mutant() == MUTANT_C ? i >> 1 : i & 1;
    *row = (lane >> 2) + 8 * row8;
    *col = 2 * (lane & 3) + col1;
}

static uint16_t half_of(uint64_t reg, int i)
{
    return (uint16_t)(((uint32_t)reg >> (16 * (i & 1))) & 0xffffu);
}

static float f32_of(uint64_t bits)
{
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---------------------------------------------------------------- mma */

/* in[0..3] = A registers, in[4..5] = B registers, in[6..9] = C (fp32 bits) */
static void mma_complete(collective *lanes[32], unsigned mask)
{
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const collective *c = lanes[l];
        int r, k, n;
        for (int i = 0; i < 8; i++) {
            a_coord(l, i, &r, &k);
            A[r][k] = bk_bf16_to_float(half_of(c->in[i / 2], i));
        }
        for (int i = 0; i < 4; i++) {
            b_coord(l, i, &k, &n);
            B[k][n] = bk_bf16_to_float(half_of(c->in[4 + i / 2], i));
        }
        for (int i = 0; i < 4; i++) {
            c_coord(l, i, &r, &n);
            C[r][n] = f32_of(c->in[6 + i]);
        }
    }
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 4; i++) {
            int r, n;
            c_coord(l, i, &r, &n);
            /* bf16 products are exact in fp32; the sum is rounded once here
             * (the hardware's internal rounding differs by a few ulp) */
            double s = C[r][n];
            for (int k = 0; k < 16; k++) s += (double)A[r][k] * (double)B[k][n];
            lanes[l]->out[i] = bits_of((float)s);
        }
    }
    (void)mask;
}

void mma_bf16_m16n8k16(const char *file, int line, float d[4], const uint32_t a[4],
                       const uint32_t b[2], const float c[4])
{
    collective col;
    memset(&col, 0, sizeof col);
    col.kind = C_MMA;
    col.mask = 0xffffffffu;
    col.file = file;
    col.line = line;
    for (int i = 0; i < 4; i++) col.in[i] = a[i];
    for (int i = 0; i < 2; i++) col.in[4 + i] = b[i];
    for (int i = 0; i < 4; i++) col.in[6 + i] = bits_of(c[i]);
    collective_join(&col, mma_complete);
    for (int i = 0; i < 4; i++) d[i] = f32_of(col.out[i]);
}

/* ---------------------------------------------------------------- ldmatrix */

/* in[0] base, in[1] n, in[2] offset, in[3] name, in[4] num, in[5] trans */
static const uint16_t *ld_row(const collective *c, int lane)
{
    const uint16_t *base = (const uint16_t *)(uintptr_t)c->in[0];
    int64_t n = (int64_t)c->in[1], off = (int64_t)c->in[2];
    const char *name = (const char *)(uintptr_t)c->in[3];
    if (off < 0 || off + 8 > n)
        fail_thread("ldmatrix at %s:%d: lane %d's row %s[%lld .. %lld] is out of bounds (%lld "
                    "elements)",
                    c->file, c->line, lane, name, (long long)off, (long long)off + 7, (long long)n);
    const uint16_t *p = base + off;
    if ((uintptr_t)p % 16 != 0)
        fail_thread("ldmatrix at %s:%d: lane %d's row %s + %lld is not 16-byte aligned", c->file,
                    c->line, lane, name, (long long)off);
    return p;
}

static void ldmatrix_complete(collective *lanes[32], unsigned mask)
{
    int num = (int)lanes[0]->in[4], trans = (int)lanes[0]->in[5];
    for (int l = 1; l < 32; l++)
        if ((int)lanes[l]->in[4] != num || (int)lanes[l]->in[5] != trans)
            fail_thread("ldmatrix at %s:%d: lanes disagree on the form (x%d%s vs x%d%s)",
                        lanes[l]->file, lanes[l]->line, num, trans ? ".trans" : "",
                        (int)lanes[l]->in[4], lanes[l]->in[5] ? ".trans" : "");
    uint16_t M[4][8][8];
    int warp = t_launch->current->warp;
    for (int j = 0; j < num; j++)
        for (int r = 0; r < 8; r++) {
            const collective *c = lanes[8 * j + r];
            const uint16_t *row = ld_row(c, 8 * j + r);
            /* a read of the row by the lane that gave its address, not a fence */
            racecheck_access(warp_lane(warp, 8 * j + r), (const void *)(uintptr_t)c->in[0], row, 16,
                             0);
            memcpy(M[j][r], row, 16);
        }
    if (trans && mutant() == MUTANT_LDMATRIX_TRANS) trans = 0;
    int by_address = !trans && mutant() == MUTANT_LDMATRIX;
    for (int l = 0; l < 32; l++) {
        int row = by_address ? l & 7 : l >> 2, col = 2 * (by_address ? l >> 3 : l & 3);
        for (int j = 0; j < num; j++) {
            uint16_t lo = trans ? M[j][col][row] : M[j][row][col];
            uint16_t hi = trans ? M[j][col + 1][row] : M[j][row][col + 1];
            lanes[l]->out[j] = (uint64_t)lo | ((uint64_t)hi << 16);
        }
    }
    (void)mask;
}

void ldmatrix(const char *file, int line, int num, int trans, uint32_t *r,
              const sptr<const uint16_t> &row)
{
    if (num != 1 && num != 2 && num != 4)
        fail_thread("ldmatrix at %s:%d: .x%d is not x1, x2 or x4", file, line, num);
    collective col;
    memset(&col, 0, sizeof col);
    col.kind = C_LDMATRIX;
    col.mask = 0xffffffffu;
    col.file = file;
    col.line = line;
    col.in[0] = (uint64_t)(uintptr_t)row.base;
    col.in[1] = (uint64_t)row.n;
    col.in[2] = (uint64_t)row.off;
    col.in[3] = (uint64_t)(uintptr_t)row.name;
    col.in[4] = (uint64_t)num;
    col.in[5] = (uint64_t)trans;
    collective_join(&col, ldmatrix_complete);
    for (int j = 0; j < num; j++) r[j] = (uint32_t)col.out[j];
}

/* ---------------------------------------------------------------- cp.async */

/* The copy lands: thread t writes its destination. */
static void copy_now(thread_state *t, const pending_copy *c)
{
    racecheck_access(t, c->shared_base, c->dst, (size_t)c->bytes, 1);
    memcpy(c->dst, c->src, (size_t)c->src_bytes);
    memset((char *)c->dst + c->src_bytes, 0, (size_t)(c->bytes - c->src_bytes));
}

void cp_async(const char *file, int line, void *dst, const void *dst_base, const void *src,
              int bytes, int src_bytes)
{
    thread_state *t = t_launch->current;
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fail_thread("cp.async at %s:%d: %d bytes (4, 8 or 16 only)", file, line, bytes);
    if (src_bytes < 0 || src_bytes > bytes)
        fail_thread("cp.async at %s:%d: source size %d outside [0, %d]", file, line, src_bytes,
                    bytes);
    if ((uintptr_t)dst % (uintptr_t)bytes != 0 ||
        (src_bytes > 0 && (uintptr_t)src % (uintptr_t)bytes != 0))
        fail_thread("cp.async at %s:%d: addresses not aligned to the %d bytes copied", file, line,
                    bytes);
    /* the bounds of the source (its alignment, which PTX requires of both ends, is above) */
    if (src_bytes > 0) check_global_read(src, (size_t)src_bytes, 1, file, line);
    if (t->copies == NULL) {
        t->copies = static_cast<pending_copy *>(malloc(MAX_PENDING_COPIES * sizeof(pending_copy)));
        if (t->copies == NULL) fail_thread("out of memory for cp.async");
    }
    if (t->n_copies == MAX_PENDING_COPIES)
        fail_thread("cp.async at %s:%d: more than %d copies pending (missing wait_group?)", file,
                    line, (int)MAX_PENDING_COPIES);
    /* the destination may change from now until the wait: a write already */
    racecheck_access(t, dst_base, dst, (size_t)bytes, 1);
    pending_copy *c = &t->copies[t->n_copies++];
    c->dst = dst;
    c->shared_base = dst_base;
    c->src = src;
    c->bytes = bytes;
    c->src_bytes = src_bytes;
    c->group = -1;
}

void cp_async_commit(void)
{
    thread_state *t = t_launch->current;
    for (int i = 0; i < t->n_copies; i++)
        if (t->copies[i].group < 0) t->copies[i].group = t->next_group;
    t->next_group++;
}

void cp_async_wait(int n)
{
    thread_state *t = t_launch->current;
    int keep = 0;
    for (int i = 0; i < t->n_copies; i++) {
        pending_copy *c = &t->copies[i];
        if (c->group >= 0 && c->group < t->next_group - n)
            copy_now(t, c);
        else
            t->copies[keep++] = *c;
    }
    t->n_copies = keep;
}

void copies_flush(thread_state *t)
{
    for (int i = 0; i < t->n_copies; i++) copy_now(t, &t->copies[i]);
    t->n_copies = 0;
}

} // namespace bk_emu
