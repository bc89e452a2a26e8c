/* The current task's user registers: ip, sp and bp from bpf_task_pt_regs(bpf_get_current_task_btf()),
 * the registers saved when the task last entered the kernel, or those of the interrupt if it was in user
 * mode. pt_regs is the one kernel struct read (the stable ABI). Shared by the stack copy (ustack.h) and
 * the kernel's unwinder (kunwind.h). */
#ifndef PROFILER_UREGS_H
#define PROFILER_UREGS_H

/* 0 when the task has a user context to return to, and its registers are in *ip, *sp, *bp */
static __always_inline int user_regs(u64 *ip, u64 *sp, u64 *bp)
{
    struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
    if (!regs)
        return -1;
    /* ip, cs, flags and sp follow one another in pt_regs: one read for the four */
    u64 tail[4] = {};
    _Static_assert(offsetof(struct pt_regs, sp) == offsetof(struct pt_regs, ip) + 3 * sizeof(u64), "pt_regs: ip, cs, flags, sp");
    if (bpf_probe_read_kernel(tail, sizeof(tail), &regs->ip) || (tail[1] & 3) != 3)
        return -1;   /* no user mode to return to: a kernel thread */
    *ip = tail[0];
    *sp = tail[3];
    bpf_probe_read_kernel(bp, sizeof(*bp), &regs->bp);
    return 0;
}

#endif
