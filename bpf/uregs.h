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
    u64 cs = 0;
    bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs);
    if ((cs & 3) != 3)   /* no user mode to return to: a kernel thread */
        return -1;
    bpf_probe_read_kernel(ip, sizeof(*ip), &regs->ip);
    bpf_probe_read_kernel(sp, sizeof(*sp), &regs->sp);
    bpf_probe_read_kernel(bp, sizeof(*bp), &regs->bp);
    return 0;
}

#endif
