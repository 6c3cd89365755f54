/* simt_fiber.cc: fibers on one OS thread (see simt_fiber.h). The first switch
 * into a new fiber goes through makecontext/setcontext (the portable way to
 * start running on a fresh stack; setcontext rather than swapcontext, which
 * ASan warns about, since the way back is a jmp_buf anyway); the fiber then
 * records a jmp_buf and jumps back, and from then on every switch is a
 * _setjmp/_longjmp pair. */
#include "kernels/emu/simt_fiber.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define BK_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BK_EMU_ASAN 1
#endif
#endif

#ifdef BK_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace bk_emu
{

static __thread fiber *t_main;     /* this OS thread's main fiber */
static __thread fiber *t_creating; /* the fiber being started */
static __thread jmp_buf t_create_jb;

static void asan_start(void **fake, const fiber *to)
{
#ifdef BK_EMU_ASAN
    __sanitizer_start_switch_fiber(fake, to->asan_bottom, to->asan_size);
#else
    (void)fake, (void)to;
#endif
}

static void asan_finish(void *fake, const void **bottom_old, size_t *size_old)
{
#ifdef BK_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
    (void)fake, (void)bottom_old, (void)size_old;
#endif
}

size_t fiber_default_stack(void)
{
#ifdef BK_EMU_ASAN
    return 256 * 1024;
#else
    return 64 * 1024;
#endif
}

void fiber_main_init(fiber *main_f)
{
    main_f->stack = NULL;
    main_f->stack_size = 0;
    main_f->mapping = NULL;
    main_f->mapping_size = 0;
    main_f->entry = NULL;
    main_f->arg = NULL;
    main_f->asan_bottom = NULL; /* learnt at the first switch into a fiber */
    main_f->asan_size = 0;
    t_main = main_f;
}

/* First code to run on a new stack: learn the main stack's bounds (ASan),
 * record where to resume, and go back to fiber_create. */
static void trampoline(void)
{
    fiber *self = t_creating;
    const void *bottom = NULL;
    size_t size = 0;
    asan_finish(NULL, &bottom, &size);
    if (t_main->asan_bottom == NULL) {
        t_main->asan_bottom = bottom;
        t_main->asan_size = size;
    }
    void *fake = NULL;
    if (_setjmp(self->jb) == 0) {
        asan_start(&fake, t_main);
        _longjmp(t_create_jb, 1);
    }
    asan_finish(fake, NULL, NULL);
    self->entry(self->arg);
    fprintf(stderr, "bk_emu: a fiber's entry function returned\n");
    abort();
}

int fiber_create(fiber *f, size_t stack_size, void (*entry)(void *), void *arg)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = (stack_size + page - 1) / page * page;
    void *map = mmap(NULL, size + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return -1;
    /* guard page below the stack: an overflow faults instead of corrupting */
    if (mprotect(map, page, PROT_NONE) != 0) {
        munmap(map, size + page);
        return -1;
    }
    f->mapping = (char *)map;
    f->mapping_size = size + page;
    f->stack = f->mapping + page;
    f->stack_size = size;
    f->entry = entry;
    f->arg = arg;
    f->asan_bottom = f->stack;
    f->asan_size = size;

    ucontext_t uc;
    if (getcontext(&uc) != 0) return -1;
    uc.uc_stack.ss_sp = f->stack;
    uc.uc_stack.ss_size = size;
    uc.uc_link = NULL;
    makecontext(&uc, trampoline, 0);
    t_creating = f;
    void *fake = NULL;
    if (_setjmp(t_create_jb) == 0) {
        asan_start(&fake, f);
        setcontext(&uc); /* the trampoline comes back through t_create_jb */
    }
    asan_finish(fake, NULL, NULL);
    return 0;
}

void fiber_destroy(fiber *f)
{
    if (f->mapping == NULL) return;
#ifdef BK_EMU_ASAN
    /* frames abandoned on this stack leave poisoned redzones behind */
    __asan_unpoison_memory_region(f->stack, f->stack_size);
#endif
    munmap(f->mapping, f->mapping_size);
    f->mapping = NULL;
    f->stack = NULL;
}

void fiber_switch(fiber *from, fiber *to)
{
    void *fake = NULL;
    if (_setjmp(from->jb) == 0) {
        asan_start(&fake, to);
        _longjmp(to->jb, 1);
    }
    asan_finish(fake, NULL, NULL);
}

} // namespace bk_emu
