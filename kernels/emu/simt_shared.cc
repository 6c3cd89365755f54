/* simt_shared.cc: the shared memory of the block the SIMT emulator runs
 * (simt_shared.h): arrays allocated at their first declaration in a block,
 * found again by the other threads through the declaration's address, filled
 * with 0xff bytes, freed at the end of the block; CUDA's limits on their size;
 * the out-of-bounds report. */
#include "kernels/emu/simt_shared.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/emu/simt_internal.h"

namespace bk_emu
{

/* sm_80's limits (the smaller of the architectures built): 48 KiB of static
 * shared memory per block, 163 KiB in all with the dynamic opt-in. */
enum { STATIC_SMEM_LIMIT = 48 * 1024, TOTAL_SMEM_LIMIT = 163 * 1024 };

static void *fresh(size_t bytes)
{
    size_t rounded = (bytes + 127) / 128 * 128;
    void *p = aligned_alloc(128, rounded ? rounded : 128);
    if (p == NULL) fail_thread("out of memory allocating %zu bytes of shared memory", bytes);
    memset(p, 0xff, rounded ? rounded : 128);
    return p;
}

void shared_block_begin(launch_state *L)
{
    L->n_shared = 0;
    L->static_smem = 0;
    L->dyn_data = NULL;
    if (L->dyn_smem > 0) {
        L->dyn_data = aligned_alloc(128, (L->dyn_smem + 127) / 128 * 128);
        if (L->dyn_data) memset(L->dyn_data, 0xff, L->dyn_smem);
    }
}

void shared_block_end(launch_state *L)
{
    for (int i = 0; i < L->n_shared; i++) free(L->shared[i].data);
    L->n_shared = 0;
    free(L->dyn_data);
    L->dyn_data = NULL;
}

void *shared_array(const void *site, const char *name, size_t bytes)
{
    launch_state *L = t_launch;
    for (int i = 0; i < L->n_shared; i++) {
        shared_entry *e = &L->shared[i];
        if (e->site != site) continue;
        if (e->bytes != bytes)
            fail_thread("__shared__ array %s declared with %zu bytes here and %zu bytes by another "
                        "thread",
                        name, bytes, e->bytes);
        return e->data;
    }
    if (L->n_shared == MAX_SHARED_ARRAYS)
        fail_thread("more than %d __shared__ arrays in one kernel", MAX_SHARED_ARRAYS);
    L->static_smem += bytes;
    if (L->static_smem > STATIC_SMEM_LIMIT)
        fail_thread("__shared__ array %s brings the static shared memory to %zu bytes, over the %d "
                    "of CUDA",
                    name, L->static_smem, (int)STATIC_SMEM_LIMIT);
    if (L->static_smem + L->dyn_smem > TOTAL_SMEM_LIMIT)
        fail_thread("shared memory of %zu static + %zu dynamic bytes is over sm_80's %d per block",
                    L->static_smem, L->dyn_smem, (int)TOTAL_SMEM_LIMIT);
    shared_entry *e = &L->shared[L->n_shared++];
    e->site = site;
    e->name = name;
    e->bytes = bytes;
    e->data = fresh(bytes);
    return e->data;
}

void *shared_dynamic(const char *name, size_t *bytes)
{
    launch_state *L = t_launch;
    if (L->dyn_smem > 0 && L->dyn_data == NULL)
        fail_thread("out of memory allocating %zu bytes of dynamic shared memory (%s)", L->dyn_smem,
                    name);
    if (L->static_smem + L->dyn_smem > TOTAL_SMEM_LIMIT)
        fail_thread("shared memory of %zu static + %zu dynamic bytes is over sm_80's %d per block",
                    L->static_smem, L->dyn_smem, (int)TOTAL_SMEM_LIMIT);
    *bytes = L->dyn_smem;
    return L->dyn_data;
}

void shared_oob(const char *name, int64_t index, int64_t count, int64_t n, size_t elem)
{
    if (count == 1)
        fail_thread("shared memory out of bounds: %s[%lld] of %lld elements of %zu bytes", name,
                    (long long)index, (long long)n, elem);
    fail_thread("shared memory out of bounds: %s[%lld .. %lld] of %lld elements of %zu bytes", name,
                (long long)index, (long long)(index + count - 1), (long long)n, elem);
}

void shared_misaligned(const char *name, int64_t byte_offset, size_t elem)
{
    fail_thread("shared memory: %s at byte offset %lld seen as %zu-byte elements (misaligned)",
                name, (long long)byte_offset, elem);
}

} // namespace bk_emu
