/* The current task's user registers and a copy of the top of its user stack, for unwinding in user
 * space with each object's CFI (what perf's --call-graph dwarf records). Only pt_regs is read (the
 * stable ABI), through bpf_task_pt_regs(bpf_get_current_task_btf()): the registers saved when the task
 * last entered the kernel, or those of the interrupt if it was in user mode.
 *
 * The copy starts at the page holding sp and takes whole pages upward, USTACK_PAGES + 1 of them, so at
 * least USTACK_PAGES * 4096 bytes above sp; it stops at the first page that cannot be read. A read that
 * crosses the end of the stack mapping fails whole (-EFAULT), so page by page loses nothing that is
 * mapped, needs no knowledge of where the mapping ends, and every read has a constant size and offset. */
#ifndef PROFILER_USTACK_H
#define PROFILER_USTACK_H

#include "uregs.h"

#ifndef USTACK_PAGES
#define USTACK_PAGES 4   /* --stack-size / 4096 */
#endif
#define USTACK_PAGE 4096

struct ustack_t {
    u64 ip;
    u64 sp;
    u64 bp;
    u64 base;    /* the user address of stack[0]: sp rounded down to its page */
    u32 size;    /* bytes copied from base (whole pages); 0: none */
    s32 err;     /* why the copy stopped before USTACK_PAGES + 1 pages (a read's error), else 0;
                  * 1: no user context (a kernel thread) */
    u8 stack[(USTACK_PAGES + 1) * USTACK_PAGE];
};

/* Fill *u for the current task. Returns 0 when there are user registers to unwind from. */
static __always_inline int ustack_capture(struct ustack_t *u)
{
    u->size = 0;
    u->err = 1;
    if (user_regs(&u->ip, &u->sp, &u->bp))
        return -1;
    u->base = u->sp & ~(u64)(USTACK_PAGE - 1);
    u->err = 0;
#pragma unroll
    for (int i = 0; i <= USTACK_PAGES; i++) {
        long err = bpf_probe_read_user(&u->stack[i * USTACK_PAGE], USTACK_PAGE,
                                       (void *)(u->base + (u64)i * USTACK_PAGE));
        if (err) {
            u->err = err;
            break;
        }
        u->size += USTACK_PAGE;
    }
    return 0;
}

#endif
