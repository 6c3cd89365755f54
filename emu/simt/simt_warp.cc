/* simt_warp.cc: warp collectives in the SIMT emulator: how lanes meet
 * (collective_join, shared with mma.sync and ldmatrix) and the shuffles,
 * votes and __syncwarp built on it (simt_warp.h).
 *
 * A lane that joins stores its inputs and waits (its fiber switches to the
 * scheduler) until every lane of its mask has joined; the last one to join
 * computes every lane's result and releases them all. Checked on each join:
 * the caller is in its mask, every lane of the mask exists and has not
 * exited, and no lane of the mask waits in a different collective (another
 * kind or mask) whose own mask names the caller: those two would wait for
 * each other forever. */
#include "emu/simt/simt_warp.h"

#include <string.h>

#include "emu/simt/simt_internal.h"

namespace bk_emu
{

thread_state *warp_lane(int warp, int lane)
{
    return &t_launch->threads[warp * 32 + lane];
}

static void check_mask(const collective *c, const thread_state *t)
{
    const char *op = collective_name(c->kind);
    if (c->mask == 0u) fail_thread("%s at %s:%d with an empty lane mask", op, c->file, c->line);
    if (!((c->mask >> t->lane) & 1u))
        fail_thread("%s at %s:%d: lane %d calls it with mask 0x%08x, which does not name it", op,
                    c->file, c->line, t->lane, c->mask);
    for (int l = 0; l < 32; l++) {
        if (!((c->mask >> l) & 1u)) continue;
        const thread_state *o = warp_lane(t->warp, l);
        if (o->state == T_ABSENT)
            fail_thread("%s at %s:%d: mask 0x%08x names lane %d, which the block (%d threads) "
                        "does not have",
                        op, c->file, c->line, c->mask, l, t_launch->n_threads);
        if (o->state == T_EXITED)
            fail_thread("%s at %s:%d: mask 0x%08x names lane %d, which has exited", op, c->file,
                        c->line, c->mask, l);
    }
}

/* mma.sync and ldmatrix.sync carry .aligned: the PTX ISA requires every lane
 * of the warp to execute the same instruction (behaviour is undefined
 * otherwise). Shuffles, votes and __syncwarp of sm_70 on may meet at
 * different instructions. */
static int aligned(int kind)
{
    return kind == C_MMA || kind == C_LDMATRIX;
}

void collective_join(collective *c, collective_fn fn)
{
    launch_state *L = t_launch;
    thread_state *t = L->current;
    schedule_point(t);
    check_mask(c, t);
    t->c = *c;
    t->state = T_WARP;
    collective *lanes[32] = {NULL};
    int all = 1;
    for (int l = 0; l < 32; l++) {
        if (!((c->mask >> l) & 1u)) continue;
        thread_state *o = warp_lane(t->warp, l);
        if (o->state != T_WARP) {
            all = 0;
            continue;
        }
        if (o->c.kind != c->kind || o->c.mask != c->mask) {
            /* lane l waits in another collective: fine if that one can complete
             * without this lane; if it needs this lane, neither ever will */
            if ((o->c.mask >> t->lane) & 1u)
                fail_thread("lane %d calls %s at %s:%d with mask 0x%08x while lane %d waits for "
                            "it in %s at %s:%d with mask 0x%08x",
                            t->lane, collective_name(c->kind), c->file, c->line, c->mask, l,
                            collective_name(o->c.kind), o->c.file, o->c.line, o->c.mask);
            all = 0;
            continue;
        }
        /* the same __FILE__ is nearly always the same pointer: strcmp only
         * when it is not (every lane of every warp collective passes here) */
        if (aligned(c->kind) && (o->c.line != c->line ||
                                 (o->c.file != c->file && strcmp(o->c.file, c->file) != 0)))
            fail_thread("%s is .aligned, every lane of the warp must execute the same one: lane "
                        "%d at %s:%d, lane %d at %s:%d",
                        collective_name(c->kind), t->lane, c->file, c->line, l, o->c.file,
                        o->c.line);
        lanes[l] = &o->c;
    }
    if (all) {
        fn(lanes, c->mask);
        for (int l = 0; l < 32; l++)
            if ((c->mask >> l) & 1u) warp_lane(t->warp, l)->state = T_RUN;
    } else {
        scheduler_yield(t);
    }
    memcpy(c->out, t->c.out, sizeof c->out);
}

/* ---------------------------------------------------------------- shuffles */

/* Source lane of lane l for a shuffle of this kind; l itself when the source
 * falls outside l's segment of `width` lanes. */
static int shfl_source(int kind, int l, int arg, int width)
{
    int seg = l & ~(width - 1), s;
    switch (kind) {
    case C_SHFL_IDX:
        return seg + (arg & (width - 1));
    case C_SHFL_UP:
        s = l - arg;
        return s >= seg ? s : l;
    case C_SHFL_DOWN:
        s = l + arg;
        return s < seg + width ? s : l;
    default: /* C_SHFL_XOR */
        s = l ^ arg;
        return s >= seg && s < seg + width ? s : l;
    }
}

static void shfl_complete(collective *lanes[32], unsigned mask)
{
    for (int l = 0; l < 32; l++) {
        collective *c = lanes[l];
        if (c == NULL) continue;
        int src = shfl_source(c->kind, l, (int)c->in[1], (int)c->in[2]);
        if (!((mask >> src) & 1u))
            fail_thread("%s at %s:%d: lane %d reads lane %d, which mask 0x%08x does not name (its "
                        "value is undefined)",
                        collective_name(c->kind), c->file, c->line, l, src, mask);
        c->out[0] = lanes[src]->in[0];
    }
}

uint64_t shfl_bits(const char *file, int line, int kind, unsigned mask, uint64_t bits, int arg,
                   int width)
{
    if (width < 1 || width > 32 || (width & (width - 1)) != 0)
        fail_thread("%s at %s:%d: width %d is not a power of two in [1, 32]", collective_name(kind),
                    file, line, width);
    if ((kind == C_SHFL_UP || kind == C_SHFL_DOWN) && arg < 0)
        fail_thread("%s at %s:%d: negative delta %d", collective_name(kind), file, line, arg);
    collective c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.mask = mask;
    c.file = file;
    c.line = line;
    c.in[0] = bits;
    c.in[1] = (uint64_t)(int64_t)arg;
    c.in[2] = (uint64_t)width;
    collective_join(&c, shfl_complete);
    return c.out[0];
}

/* ---------------------------------------------------------------- votes */

static void vote_complete(collective *lanes[32], unsigned mask)
{
    unsigned b = 0;
    for (int l = 0; l < 32; l++)
        if (lanes[l] != NULL && lanes[l]->in[0] != 0) b |= 1u << l;
    for (int l = 0; l < 32; l++)
        if (lanes[l] != NULL) lanes[l]->out[0] = b;
    (void)mask;
}

unsigned ballot(const char *file, int line, unsigned mask, int pred)
{
    collective c;
    memset(&c, 0, sizeof c);
    c.kind = C_VOTE;
    c.mask = mask;
    c.file = file;
    c.line = line;
    c.in[0] = pred != 0;
    collective_join(&c, vote_complete);
    return (unsigned)c.out[0];
}

/* __syncwarp is the one warp collective that orders the memory accesses of
 * its lanes (bar.warp.sync in the PTX memory model); the race detector counts
 * it as such. */
static void syncwarp_complete(collective *lanes[32], unsigned mask)
{
    (void)lanes;
    racecheck_syncwarp(t_launch, t_launch->current->warp, mask);
}

void syncwarp(const char *file, int line, unsigned mask)
{
    collective c;
    memset(&c, 0, sizeof c);
    c.kind = C_SYNCWARP;
    c.mask = mask;
    c.file = file;
    c.line = line;
    collective_join(&c, syncwarp_complete);
}

} // namespace bk_emu
