/* Small helpers every bpf/NAME.c shares. Filters arrive as -D cflags (set by bcctool/__init__.py), so
 * an unset filter compiles to nothing and a set one returns in the probe's first lines. */
#ifndef PROFILER_COMMON_H
#define PROFILER_COMMON_H

#include <uapi/linux/ptrace.h>

#define TASK_COMM_LEN 16

/* What every tracepoint program returns: the event goes on to perf's other consumers of the same
 * tracepoint (perf stat/record, another tracer). perf_trace_run_bpf_submit() in kernel/events/core.c
 * drops the event for all of them when the BPF programs attached to it return 0 (their results are
 * and-ed). Raw tracepoint and perf-event programs are not affected and keep their own convention. */
#define PASS_ON 1

/* 1 when the current task is outside --cgroup (FILTER_CGROUP_ID at FILTER_CGROUP_LEVEL below the v2
 * root): its ancestor at that level is the target, which also takes in groups made below it after
 * start, with no map to keep current and no struct read (the helper reads the task's own cgroup). */
static __always_inline int skip_cgroup(void)
{
#ifdef FILTER_CGROUP_ID
    if (bpf_get_current_ancestor_cgroup_id(FILTER_CGROUP_LEVEL) != FILTER_CGROUP_ID)
        return 1;
#endif
    return 0;
}

/* Any filter on the current task is set: a program that skips filtering for speed must not skip it. */
#if defined(FILTER_PID) || defined(FILTER_TID) || defined(FILTER_CGROUP_ID)
#define FILTER_TASK 1
#endif

/* 1 when the current task is excluded by --pid / --tid / --cgroup. */
static __always_inline int skip_task(u64 pid_tgid)
{
    if (skip_cgroup())
        return 1;
#ifdef FILTER_PID
    if ((u32)(pid_tgid >> 32) != FILTER_PID)
        return 1;
#endif
#ifdef FILTER_TID
    if ((u32)pid_tgid != FILTER_TID)
        return 1;
#endif
    return 0;
}

/* 1 when a tid/tgid pair read from tracepoint fields is excluded by --pid / --tid. */
static __always_inline int skip_ids(u32 tgid, u32 tid)
{
#ifdef FILTER_PID
    if (tgid != FILTER_PID)
        return 1;
#endif
#ifdef FILTER_TID
    if (tid != FILTER_TID)
        return 1;
#endif
    return 0;
}

/* -DSKIP_OWN: the profiler's own processes (this script, the app that started it and everything they
 * started: bcctool/own.py) are left out of a system-wide run. User space keeps `own_tgids` current each
 * interval and bumps `own_gen` when it changes, so a program may keep its answer per thread and look
 * again only after a change. The lookup is written in each program: BCC rewrites map methods only in the
 * main file, not in a helper here. */
#ifdef SKIP_OWN
BPF_HASH(own_tgids, u32, u8, 4096);
BPF_ARRAY(own_gen, u32, 1);
#endif

/* BCC's rewriter cannot see map methods inside macros or helper functions, so lookup-or-init and
 * lost counters are written out in each probe; a map of lost events is a one-slot per-CPU array. */
#define LOST_COUNTER(name) BPF_PERCPU_ARRAY(name, u64, 1)

#endif
