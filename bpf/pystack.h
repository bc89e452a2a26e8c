/* The CPython frames of the current thread at the sample, for naming in user space (bcctool/pyframes.py).
 *
 * CPython 3.11 keeps its frames (_PyInterpreterFrame) in per-thread chunks on the heap, so the copy of
 * the C stack does not hold them. For each python process user space puts in py_procs where its
 * _PyRuntime lives and the offsets of the fields below (CPython's own user-space ABI of that build,
 * never a kernel struct). The thread's PyThreadState is the GIL holder's (gilstate.tstate_current) when
 * that is this thread, else the one of the interpreter's thread list whose native_thread_id is this
 * thread; from it tstate->cframe->current_frame, then ->previous frame by frame. Each frame gives its
 * code object (named in user space from /proc/PID/mem, cached per code address) and its last
 * instruction (the line). is_entry marks the first frame of one _PyEval_EvalFrameDefault invocation:
 * user space hangs each run of frames under its eval loop's native frame. */
#ifndef PROFILER_PYSTACK_H
#define PROFILER_PYSTACK_H

#ifndef PY_FRAMES
#define PY_FRAMES 64     /* frames taken at most per sample */
#endif
#define PY_THREADS 32    /* thread states searched at most for a thread that does not hold the GIL */

struct py_proc_t {       /* per python process; user space fills it (bcctool/pyframes.py Layout) */
    u64 tstate_current;  /* the address of _PyRuntime.gilstate.tstate_current */
    u64 interp_head;     /* the address of _PyRuntime.interpreters.head */
    u32 interp_threads;  /* offsetof(PyInterpreterState, threads.head) */
    u32 tstate_next;
    u32 tstate_native_tid;
    u32 tstate_cframe;
    u32 cframe_current;  /* offsetof(_PyCFrame, current_frame) */
    u32 frame_code;      /* offsetof(_PyInterpreterFrame, f_code) */
    u32 frame_previous;
    u32 frame_prev_instr;
    u32 frame_is_entry;
    u32 pad;
};
/* BCC rewrites map calls in the main file only: the program looks its process up in py_procs
 * (PY_PROCS_MAP declares it) and hands the entry to pystack_capture() */
#define PY_PROCS_MAP BPF_HASH(py_procs, u32, struct py_proc_t, 1024)

enum { PY_OK, PY_NOT_PYTHON, PY_NO_THREAD, PY_READ, PY_TRUNCATED };

#define PY_SEED 0x707974686f6eULL   /* kuwalk.h's ku_hash seed for a Python stack stored by its hash ("python") */

struct pystack_t {
    u32 depth;                  /* frames in frames[] */
    s32 err;                    /* PY_OK: the chain's end was reached; else why the walk stopped */
    u64 frames[PY_FRAMES][2];   /* innermost first: code object address | is_entry in bit 0, prev_instr */
};

static __always_inline u64 py_read(u64 addr)
{
    u64 v = 0;
    if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
        return 0;
    return v;
}

/* py: the process's py_procs entry, or NULL (not a registered python: no frames) */
static __always_inline void pystack_capture(struct py_proc_t *py, u32 tid, struct pystack_t *p)
{
    p->depth = 0;
    p->err = PY_NOT_PYTHON;
    if (!py)
        return;
    p->err = PY_NO_THREAD;
    u64 ts = py_read(py->tstate_current);
    if (!ts || py_read(ts + py->tstate_native_tid) != tid) {
        u64 t = py_read(py_read(py->interp_head) + py->interp_threads);
        ts = 0;
        for (int i = 0; i < PY_THREADS && t; i++) {
            if (py_read(t + py->tstate_native_tid) == tid) {
                ts = t;
                break;
            }
            t = py_read(t + py->tstate_next);
        }
    }
    if (!ts)
        return;
    u64 cframe = py_read(ts + py->tstate_cframe);
    if (!cframe) {
        p->err = PY_READ;
        return;
    }
    u64 frame = py_read(cframe + py->cframe_current);
    p->err = PY_TRUNCATED;
    for (int i = 0; i < PY_FRAMES; i++) {
        if (!frame) {
            p->err = PY_OK;
            break;
        }
        u64 code = 0;
        u8 entry = 0;
        if (bpf_probe_read_user(&code, sizeof(code), (void *)(frame + py->frame_code)) ||
            bpf_probe_read_user(&entry, sizeof(entry), (void *)(frame + py->frame_is_entry))) {
            p->err = PY_READ;
            break;
        }
        p->frames[i][0] = code | (entry & 1);
        p->frames[i][1] = py_read(frame + py->frame_prev_instr);
        p->depth = i + 1;
        frame = py_read(frame + py->frame_previous);
    }
}

#endif
