/* simt_fiber.cc: fibers on one OS thread (see simt_fiber.h).
 *
 * On x86-64 a switch is bk_emu_stack_switch below: it pushes the registers
 * the calling convention says a call preserves, stores the stack pointer,
 * loads the other fiber's and pops its registers. A new fiber's stack is laid
 * out as if it had switched away at the entry of its trampoline. It is no
 * longjmp because AddressSanitizer intercepts longjmp: before each jump it
 * clears the shadow of the whole stack being left and asks the kernel for the
 * signal stack (sigaltstack), which made ASan's emulated runs spend most of
 * their time in memset and system calls.
 *
 * Elsewhere the first switch into a new fiber goes through
 * makecontext/setcontext (the portable way to start running on a fresh stack;
 * setcontext rather than swapcontext, which ASan warns about, since the way
 * back is a jmp_buf anyway); the fiber then records a jmp_buf and jumps back,
 * and from then on every switch is a _setjmp/_longjmp pair. */
#include "emu/simt/simt_fiber.h"

#include <stdint.h>
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
static __thread fiber *t_entering; /* the fiber a switch is resuming */

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
    main_f->sp = NULL;
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

/* The first thing a new fiber does: complete the switch into it (the first
 * ever on this OS thread came from main, whose stack ASan names here). */
static void finish_first_switch(void)
{
    const void *bottom = NULL;
    size_t size = 0;
    asan_finish(NULL, &bottom, &size);
    if (t_main->asan_bottom == NULL) {
        t_main->asan_bottom = bottom;
        t_main->asan_size = size;
    }
}

/* Runs the fiber's entry, which must never return. */
[[noreturn]] static void run_entry(fiber *self)
{
    self->entry(self->arg);
    fprintf(stderr, "bk_emu: a fiber's entry function returned\n");
    abort();
}

/* Maps f's stack of stack_size bytes (rounded up to pages) above a guard
 * page: an overflow faults instead of corrupting. */
static int map_stack(fiber *f, size_t stack_size, void (*entry)(void *), void *arg)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = (stack_size + page - 1) / page * page;
    void *map = mmap(NULL, size + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return -1;
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
    return 0;
}

#if defined(__x86_64__)

/* bk_emu_stack_switch(save_sp, load_sp): saves the callee-saved registers
 * (rbp, rbx, r12-r15, the SSE and x87 control words) on the running stack,
 * stores its pointer in *save_sp, and resumes the stack at load_sp, which a
 * call of its own (or fiber_create) left in the same layout, from sp up:
 * control words (8 bytes), r15, r14, r13, r12, rbx, rbp, return address. */
extern "C" void bk_emu_stack_switch(void **save_sp, void *load_sp);
asm(R"(
    .text
    .p2align 4
    .globl bk_emu_stack_switch
    .hidden bk_emu_stack_switch
    .type bk_emu_stack_switch, @function
bk_emu_stack_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size bk_emu_stack_switch, .-bk_emu_stack_switch
)");

/* Where a new fiber's first switch returns to: on its own stack, aligned as
 * at a call, with a null return address and frame pointer above it (the end
 * of every backtrace). */
[[noreturn]] static void trampoline(void)
{
    finish_first_switch();
    run_entry(t_entering);
}

int fiber_create(fiber *f, size_t stack_size, void (*entry)(void *), void *arg)
{
    if (map_stack(f, stack_size, entry, arg) != 0) return -1;
    uint32_t mxcsr;
    uint16_t fpcw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpcw));
    void **slot = (void **)(f->stack + f->stack_size); /* page-aligned top */
    *--slot = NULL;                                    /* the trampoline's return address */
    *--slot = reinterpret_cast<void *>(&trampoline);
    for (int r = 0; r < 6; r++) *--slot = NULL; /* rbp, rbx, r12-r15 */
    *--slot = (void *)(uintptr_t)(mxcsr | (uint64_t)fpcw << 32);
    f->sp = slot;
    return 0;
}

void fiber_switch(fiber *from, fiber *to)
{
    void *fake = NULL;
    t_entering = to;
    asan_start(&fake, to);
    bk_emu_stack_switch(&from->sp, to->sp);
    asan_finish(fake, NULL, NULL);
}

#else

static __thread jmp_buf t_create_jb;

/* First code to run on a new stack: record where to resume, go back to
 * fiber_create, and enter the fiber when first switched to. */
static void trampoline(void)
{
    fiber *self = t_entering;
    finish_first_switch();
    void *fake = NULL;
    if (_setjmp(self->jb) == 0) {
        asan_start(&fake, t_main);
        _longjmp(t_create_jb, 1);
    }
    asan_finish(fake, NULL, NULL);
    run_entry(self);
}

int fiber_create(fiber *f, size_t stack_size, void (*entry)(void *), void *arg)
{
    if (map_stack(f, stack_size, entry, arg) != 0) return -1;
    ucontext_t uc;
    if (getcontext(&uc) != 0) return -1;
    uc.uc_stack.ss_sp = f->stack;
    uc.uc_stack.ss_size = f->stack_size;
    uc.uc_link = NULL;
    makecontext(&uc, trampoline, 0);
    t_entering = f;
    void *fake = NULL;
    if (_setjmp(t_create_jb) == 0) {
        asan_start(&fake, f);
        setcontext(&uc); /* the trampoline comes back through t_create_jb */
    }
    asan_finish(fake, NULL, NULL);
    return 0;
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

#endif

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

} // namespace bk_emu
