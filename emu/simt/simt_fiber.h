/* simt_fiber.h: the fibers the SIMT emulator runs CUDA threads on: a stack
 * each, switched without a system call: on x86-64 by saving the registers a
 * call preserves and swapping stack pointers, elsewhere with _setjmp/_longjmp
 * after a start through ucontext (makecontext/setcontext; the ucontext calls
 * save or restore the signal mask with a system call each). Under
 * AddressSanitizer every switch is announced with
 * __sanitizer_start_switch_fiber and __sanitizer_finish_switch_fiber, so ASan
 * knows which stack is live and reports no false stack overflows.
 *
 * One OS thread owns a set of fibers and a "main" fiber (its own stack); the
 * emulator's scheduler runs on main and switches to a CUDA thread's fiber,
 * which runs until it blocks (barrier, warp collective) or finishes and then
 * switches back. Nothing here knows about CUDA. */
#ifndef BURST_EMU_SIMT_FIBER_H
#define BURST_EMU_SIMT_FIBER_H

#include <setjmp.h>
#include <stddef.h>

namespace bk_emu
{

struct fiber {
    void *sp;          /* where to resume this fiber (x86-64) */
    jmp_buf jb;        /* where to resume this fiber (elsewhere) */
    char *stack;       /* usable stack (above a guard page); NULL for main */
    size_t stack_size; /* bytes of usable stack */
    char *mapping;     /* the whole mapping, guard page included */
    size_t mapping_size;
    void (*entry)(void *); /* run when first resumed; must never return */
    void *arg;
    const void *asan_bottom; /* this fiber's stack, as ASan knows it */
    size_t asan_size;
};

/* Prepares the calling OS thread's main fiber (needed before any switch). */
void fiber_main_init(fiber *main_f);

/* Creates a fiber with a stack of stack_size bytes (plus a guard page below
 * it) that calls entry(arg) when first switched to. Returns 0 on success. */
int fiber_create(fiber *f, size_t stack_size, void (*entry)(void *), void *arg);

/* Frees the stack of a fiber that will never run again (it may be suspended
 * anywhere: its frames are dropped without unwinding). */
void fiber_destroy(fiber *f);

/* Suspends `from` (the running fiber) and resumes `to`. */
void fiber_switch(fiber *from, fiber *to);

/* Stack size for CUDA threads: larger under ASan (redzones around locals). */
size_t fiber_default_stack(void);

} // namespace bk_emu

#endif
