/* The floor of syscall tracing: empty programs on the sys_enter and sys_exit raw tracepoints. What a
 * tracer adds beyond this is the cost of its own work (timestamps, map updates), not of being there.
 * With -DCLOCK each program also reads bpf_ktime_get_ns() once: the least a latency tracer must do.
 * With -DSTORE as well, the entry time is kept per thread in task storage and read back at exit: the
 * least a tracer that times each syscall exactly must do on this kernel (the per-thread lookup in each
 * program is what -DCLOCK alone does not pay). */
#ifdef STORE
struct entry_t {
    u64 ts;
};
BPF_TASK_STORAGE(entry, struct entry_t);
#endif

RAW_TRACEPOINT_PROBE(sys_enter)
{
#if defined(STORE)
    struct entry_t *e = entry.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0,
                                               BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (e)
        e->ts = bpf_ktime_get_ns();
    return 0;
#elif defined(CLOCK)
    return bpf_ktime_get_ns() == 1;   /* used, so the call stays */
#else
    return 0;
#endif
}

RAW_TRACEPOINT_PROBE(sys_exit)
{
#if defined(STORE)
    struct entry_t *e = entry.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0, 0);
    if (!e || !e->ts)
        return 0;
    u64 delta = bpf_ktime_get_ns() - e->ts;
    e->ts = 0;
    return delta == 1;
#elif defined(CLOCK)
    return bpf_ktime_get_ns() == 1;
#else
    return 0;
#endif
}
