/* What the sched tracepoints' numeric fields mean, for the probes that read them (cpuschedrun, offcpu,
 * schparm). Values are the kernel's ABI as its tracefs format files print them. */
#ifndef PROFILER_SCHED_STATE_H
#define PROFILER_SCHED_STATE_H

/* sched_switch prev_state (__trace_sched_switch_state): one TASK_REPORT bit, S D T t X Z P I = bits
 * 0..7, for a task that left the CPU to wait; 0 for one still running (a yield, or a sleep cut short by
 * a signal); TASK_REPORT_MAX, 0x100 ("R+"), for one preempted. The last two stay runnable. */
#define PREV_STATE_SLEEPING 0xff
#define PREV_STATE_EXITED (0x10 | 0x20)   /* X (dead), Z (zombie): the thread's last switch */

/* task_newtask clone_flags */
#define CLONE_PARENT 0x8000
#define CLONE_THREAD 0x10000

/* what inserting a new key into a full hash map returns (-E2BIG) */
#define ERR_MAP_FULL (-7)

#endif
