/* The caller a frame-pointer walk of the user stack skips. The walk takes the ip, then follows the chain
 * of saved frame pointers from the bp register. Sampled where the innermost function's frame is not
 * linked into that chain — on its first instructions (endbr64, push %rbp, then mov %rsp,%rbp) or on its
 * ret, after the frame is popped — bp is still (or again) its caller's frame, whose return address leads
 * to the caller's caller: the caller is missing (perf -g and BCC's profile miss it as well). Its return
 * address is on top of the stack there: at [sp], or at [sp+8] between the push and the mov.
 *
 * fp_caller_restored() puts it back, second in the walk's pcs, when the bytes at the ip are one of those
 * instructions and the address read from the stack follows a call instruction (so a saved register is
 * not taken for it, as where code built without frame pointers pushes %rbp after other registers). One
 * read of the code per walk; the stack only where the code matched. */
#ifndef PROFILER_FPLEAF_H
#define PROFILER_FPLEAF_H

#include "uregs.h"

/* 1 when the bytes just before `ret` end in a call: call rel32 (e8), call *%reg (ff d0+r, with or
 * without a REX prefix), call *disp8(%reg) (ff 50+r), call *disp32(%rip) or *disp32(%reg) (ff 15,
 * ff 90+r). */
static __always_inline int fp_after_call(u64 ret)
{
    u8 b[8] = {};
    if (bpf_probe_read_user(b, sizeof(b), (void *)(ret - sizeof(b))))
        return 0;
    return b[3] == 0xe8 || (b[6] == 0xff && (b[7] & 0xf8) == 0xd0) || (b[5] == 0xff && (b[6] & 0xf8) == 0x50) ||
           (b[2] == 0xff && (b[3] == 0x15 || (b[3] & 0xf8) == 0x90));
}

/* The return address into the caller the walk from `ip` skips, or 0 when the frame at ip is linked. */
static __always_inline u64 fp_unlinked_caller(u64 ip)
{
    u8 code[4] = {};
    if (bpf_probe_read_user(code, sizeof(code), (void *)ip))
        return 0;
    u64 above;   /* where the return address is, above sp */
    if (code[0] == 0x55 || code[0] == 0xc3 || (code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa))
        above = 0;   /* push %rbp, ret, endbr64 */
    else if (code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xe5)
        above = 8;   /* mov %rsp,%rbp: %rbp pushed */
    else
        return 0;
    u64 uip, sp, bp, ret = 0;
    if (user_regs(&uip, &sp, &bp) || uip != ip)
        return 0;
    if (bpf_probe_read_user(&ret, sizeof(ret), (void *)(sp + above)) || !fp_after_call(ret))
        return 0;
    return ret;
}

/* The walk's pcs (`bytes` long, as bpf_get_stack returned, in an array of `cap` pcs) with the skipped
 * caller put back second; its new length in bytes (the outermost pc dropped if the array was full). */
static __always_inline long fp_caller_restored(u64 *pcs, long bytes, const int cap)
{
    if (bytes < 8)
        return bytes;
    u64 caller = fp_unlinked_caller(pcs[0]);
    if (!caller)
        return bytes;
    long length = bytes / 8 < cap ? bytes / 8 + 1 : cap;
    for (int i = cap - 1; i >= 2; i--)
        if (i < length)
            pcs[i] = pcs[i - 1];
    pcs[1] = caller;
    return length * 8;
}

#endif
