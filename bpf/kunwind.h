/* User stacks unwound in the kernel with "stack delta" tables (the OpenTelemetry eBPF profiler's way):
 * user space (bcctool/kunwind.py) puts every met process's executable mappings into ku_maps, one value
 * per process (sorted by address: each its file and load bias; one update per process, where an LPM
 * trie took one per aligned block, 1,350 for a pytest process). A file's CFI is turned into sorted rows
 * "from this pc: CFA = rsp|rbp + offset, rbp saved at CFA + 8 * n or unchanged, return address at
 * CFA - 8" and loaded into ku_rows (one array; each file a range of it, ku_files) the first time a walk
 * meets the file (it asks on ku_events, one file a walk; until then its frames are walked by frame
 * pointers), so only the files on sampled stacks take memory (libLLVM alone has a million rows). The
 * walk starts from the user registers (bpf_task_pt_regs, the only kernel struct read) and follows the rules of
 * bcctool/unwind.py frame by frame, reading return addresses and saved rbp with bpf_probe_read_user.
 * A pc with no usable row (no CFI; a DWARF expression: PLT stubs of odd shape, signal trampolines,
 * hand-written asm) is walked by its frame pointer, as unwind.py does where no CFI covers a pc; the
 * expression rows so walked are counted (fp_frames).
 *
 * BCC rewrites map calls in the program's main file only, so the main file declares the maps
 * (KU_MAPS) and defines the three lookups the walk makes: ku_maps_of, ku_file_at, ku_row_at.
 * BCC 0.26 cannot relocate a bpf_loop callback, so the walk is a bounded loop of KU_STEPS frames
 * (ku_walk_some) that the main file's program runs and then tail-calls itself for the next ones: the
 * verifier checks 16 frames once, not 127 (13 ms a frame on this machine: 1.6 s at every start). The
 * walk's state lives in a per-CPU map value, which the verifier does not track, so the paths through
 * one frame meet at the loop's head and its work grows with the frames, not with the paths. */
#ifndef PROFILER_KUNWIND_H
#define PROFILER_KUNWIND_H

#include "stackstore.h"
#include "uregs.h"

#define KU_FRAMES 127        /* steps at most: up to 128 pcs (unwind.py's max_frames) */
#define KU_STEPS 16          /* steps per program: the walk goes on in a tail call (8 programs at most) */
#define KU_SEARCH 20         /* binary search steps: a file holds fewer than 2^20 rows */
#define KU_MAX_FRAME_SPAN (8 << 20)   /* a frame pointer further above sp is garbage (unwind.py) */
#define KU_RA_KEPT 8         /* where the first return addresses were read, kept for a reuse to check */

/* a row's kind (bcctool/stackdeltas.py writes them); KU_SCALED: its cfa is in units of 8 bytes */
enum { KU_NONE, KU_SP, KU_BP, KU_PLT, KU_EXPR, KU_END };
#define KU_SCALED 0x80
#define KU_BP_UNKNOWN (-128) /* row.bp: rbp's rule cannot be followed; 0: unchanged */

/* how a walk ended (bcctool/kstacks.py OUTCOMES names them); KU_GO_ON: a frame was added */
#define KU_GO_ON (-1)
enum {
    KU_OUTERMOST,        /* complete: the return-address rule is undefined (_start, clone) */
    KU_RA_ZERO,          /* complete: the return address is 0 (the end of a frame-pointer chain) */
    KU_FRAME_LIMIT,      /* truncated */
    KU_NO_MAPPING,       /* failed: a pc in no executable mapping of the process */
    KU_NO_FP,            /* failed: no CFI and no usable frame pointer */
    KU_BP_LOST,          /* failed: the CFA is rbp-based and rbp was not recovered */
    KU_RA_BELOW_SP,      /* failed */
    KU_UNREADABLE,       /* failed: a read of user memory failed (not resident, or garbage) */
    KU_NOT_UP,           /* failed: the stack pointer did not move up */
    KU_NO_USER,          /* failed: no user context */
    KU_FP_WALK,          /* the process's mappings are not loaded yet: the kernel's frame-pointer walk */
};

struct ku_mapping {
    u64 start;           /* [start, end): the executable mapping */
    u64 end;
    u64 bias;            /* pc - bias = the file's own virtual address */
    u32 file;            /* ku_files index; 0: no table (JIT code, a file without CFI): frame pointers */
    u32 pad;
};

#define KU_PROC_MAPPINGS 256 /* a process's executable mappings kept (a pytest process has 135) */
#define KU_MAP_SEARCH 8      /* binary search steps over them */

struct ku_proc_maps {
    u32 count;
    u32 pad;
    struct ku_mapping m[KU_PROC_MAPPINGS];   /* sorted by start */
};

enum { KU_FILE_NEW, KU_FILE_ASKED, KU_FILE_LOADED, KU_FILE_NONE };   /* NONE: no table, frame pointers */

struct ku_file {
    u32 first;           /* its rows: ku_rows[first .. first + count) */
    u32 count;
    u32 state;           /* BPF sets ASKED (once, asking user space); user space LOADED or NONE */
    u32 pad;
};

struct ku_row {
    u32 pc;              /* from this file vaddr on */
    s16 cfa;             /* KU_SP / KU_BP: the CFA's offset; KU_PLT: the threshold of (ip & 15) */
    u8 kind;             /* | KU_SCALED */
    u8 bp;               /* as s8: rbp saved at CFA + 8 * bp; 0: unchanged; KU_BP_UNKNOWN (u8: BCC's
                          * Python side has no ctype for signed char) */
};

struct ku_walk {         /* per-CPU: the walk's registers, the mapping of the last pc, the stack so far */
    u64 ip;
    u64 sp;
    u64 bp;
    u64 map_start;
    u64 map_end;
    u64 bias;
    u32 first;
    u32 count;
    u32 bp_known;
    u32 fp_frames;       /* expression rows walked by frame pointers in this walk */
    u32 unloaded;        /* the last mapping's file has rows not loaded yet */
    u32 unloaded_frames; /* frames walked by frame pointers for that reason in this walk */
    u32 ask_file;        /* a file met for the first time in this walk, whose rows the caller asks for */
    u32 steps;           /* taken so far */
    u32 index;           /* scratch: a search's index (see ku_mapping_of) */
    u32 pad;
    u64 ra_at[KU_RA_KEPT]; /* the user addresses pcs[1..KU_RA_KEPT] were read from */
    struct ku_stack user;
};

#ifndef KU_ROWS
#define KU_ROWS (1 << 20)    /* 8 MiB of rows for every file met */
#endif
#define KU_FILES 4096
#define KU_PROCS 16384

enum { KU_PENDING, KU_READY, KU_STALE };   /* ku_procs: mappings asked for, loaded, asked for again */

struct ku_event_t {      /* to user space: load (again) the mappings of tgid, or the rows of a file */
    u32 tgid;
    u32 state;           /* KU_PENDING: met for the first time; KU_STALE: a pc in no mapping; */
    u32 file;            /* KU_FILE_ASKED: the rows of this file */
    u32 pad;
};

/* The maps, declared in the main file. ku_rows is mmap'ed by user space (BPF_F_MMAPABLE: 1 << 10). */
#define KU_MAPS                                                                                         \
    BPF_F_TABLE("hash", u32, struct ku_proc_maps, ku_maps, KU_PROCS, BPF_F_NO_PREALLOC);              \
    BPF_ARRAY(ku_files, struct ku_file, KU_FILES);                                                      \
    BPF_F_TABLE("array", u32, struct ku_row, ku_rows, KU_ROWS, 1 << 10);                                \
    BPF_TABLE("lru_hash", u32, u32, ku_procs, KU_PROCS);                                                \
    BPF_RINGBUF_OUTPUT(ku_events, 4)

static __always_inline struct ku_proc_maps *ku_maps_of(u32 tgid);
static __always_inline struct ku_file *ku_file_at(u32 file);
static __always_inline struct ku_row *ku_row_at(u32 index);

/* The user registers of the current task into w; 0 when it has a user context. */
static __always_inline int ku_regs(struct ku_walk *w)
{
    return user_regs(&w->ip, &w->sp, &w->bp);
}

/* The row that holds for file vaddr `vaddr` in the file of the last mapping: the last with pc <= vaddr. */
static __always_inline void ku_find_row(struct ku_walk *w, u64 vaddr, struct ku_row *out)
{
    out->kind = KU_NONE;
    u32 count = w->count, first = w->first;
    if (!count || vaddr >> 32)
        return;
    u32 lo = 0, hi = count;   /* rows[lo - 1].pc <= vaddr < rows[hi].pc */
#pragma clang loop unroll(disable)
    for (int j = 0; j < KU_SEARCH; j++) {
        if (lo >= hi)
            break;
        u32 mid = lo + (hi - lo) / 2;
        struct ku_row *row = ku_row_at(first + mid);
        if (!row)
            return;
        if (row->pc <= (u32)vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo)
        return;
    struct ku_row *row = ku_row_at(first + lo - 1);
    if (row)
        *out = *row;
}

/* The mapping of the process that holds pc: the last with start <= pc, if pc is below its end. Each
 * index goes through w->index (memory): the verifier does not trace an index used as a pointer offset
 * back to lo and hi, whose every value would otherwise be a state of its own (the walk did not load). */
static __always_inline struct ku_mapping *ku_mapping_of(struct ku_walk *w, struct ku_proc_maps *pm, u64 pc)
{
    u32 lo = 0, hi = pm->count;   /* m[lo - 1].start <= pc < m[hi].start */
#pragma clang loop unroll(disable)
    for (int j = 0; j <= KU_MAP_SEARCH; j++) {
        if (lo >= hi)
            break;
        u32 mid = lo + (hi - lo) / 2;
        *(volatile u32 *)&w->index = mid;
        if (pm->m[*(volatile u32 *)&w->index & (KU_PROC_MAPPINGS - 1)].start <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo)
        return 0;
    *(volatile u32 *)&w->index = lo - 1;
    struct ku_mapping *m = &pm->m[*(volatile u32 *)&w->index & (KU_PROC_MAPPINGS - 1)];
    return pc < m->end ? m : 0;
}

/* One frame: the caller's ip, sp and bp from the current ones. KU_GO_ON, or how the walk ends. */
static __always_inline int ku_step(struct ku_walk *w, struct ku_proc_maps *pm, int innermost)
{
    u64 ip = w->ip, sp = w->sp, bp = w->bp;
    u64 pc = innermost ? ip : ip - 1;   /* a return address is just past its call */
    if (pc < w->map_start || pc >= w->map_end) {
        struct ku_mapping *m = ku_mapping_of(w, pm, pc);
        if (!m)
            return KU_NO_MAPPING;
        w->map_start = m->start;
        w->map_end = m->end;
        w->bias = m->bias;
        w->first = 0;
        w->count = 0;
        w->unloaded = 0;
        struct ku_file *f = m->file ? ku_file_at(m->file) : 0;
        if (f && f->state == KU_FILE_LOADED) {
            w->first = f->first;
            w->count = f->count;
        } else if (f && f->state != KU_FILE_NONE) {
            w->unloaded = 1;
            /* a walk asks for one file (two CPUs may both ask: user space loads it once); a second new
             * file stays NEW for a later walk to ask, where marking it would leave it unasked for good */
            if (f->state == KU_FILE_NEW && !w->ask_file) {
                f->state = KU_FILE_ASKED;
                w->ask_file = m->file;
            }
        }
    }
    if (w->unloaded)
        w->unloaded_frames++;
    struct ku_row row = {};
    ku_find_row(w, pc - w->bias, &row);
    u8 kind = row.kind & ~KU_SCALED;
    s64 off = row.kind & KU_SCALED ? (s64)row.cfa * 8 : row.cfa;

    u64 ra = 0, ra_at, new_sp, new_bp = bp, cfa;
    if (kind == KU_END)
        return KU_OUTERMOST;
    if (kind == KU_SP || kind == KU_BP || kind == KU_PLT) {
        if (kind == KU_SP) {
            cfa = sp + off;
        } else if (kind == KU_BP) {
            if (!w->bp_known)
                return KU_BP_LOST;
            cfa = bp + off;
        } else {
            cfa = sp + 8 + ((s64)(ip & 15) >= off ? 8 : 0);
        }
        if (cfa - 8 < sp)
            return KU_RA_BELOW_SP;
        ra_at = cfa - 8;
        if (bpf_probe_read_user(&ra, sizeof(ra), (void *)ra_at))
            return KU_UNREADABLE;
        new_sp = cfa;
        s8 saved = (s8)row.bp;
        if (saved == KU_BP_UNKNOWN) {
            w->bp_known = 0;
        } else if (saved) {
            w->bp_known = bpf_probe_read_user(&new_bp, sizeof(new_bp), (void *)(cfa + 8 * (s64)saved)) == 0;
        }
    } else {
        /* no usable row: the frame-pointer chain, if rbp points a little above sp */
        if (kind == KU_EXPR)
            w->fp_frames++;
        if (!w->bp_known || bp < sp || bp >= sp + KU_MAX_FRAME_SPAN)
            return KU_NO_FP;
        ra_at = bp + 8;
        if (bpf_probe_read_user(&ra, sizeof(ra), (void *)ra_at) ||
            bpf_probe_read_user(&new_bp, sizeof(new_bp), (void *)bp))
            return KU_UNREADABLE;
        new_sp = bp + 16;
    }
    if (!ra)
        return KU_RA_ZERO;
    if (new_sp <= sp)
        return KU_NOT_UP;
    u32 depth = w->user.depth;
    if (depth >= KU_STACK)
        return KU_FRAME_LIMIT;
    w->user.pcs[depth & (KU_STACK - 1)] = ra;
    if (depth <= KU_RA_KEPT)   /* depth >= 1: pcs[0] is the ip */
        w->ra_at[(depth - 1) & (KU_RA_KEPT - 1)] = ra_at;
    w->user.depth = depth + 1;
    w->ip = ra;
    w->sp = new_sp;
    w->bp = new_bp;
    return KU_GO_ON;
}

/* A walk from the registers in w (ku_regs) begins: the innermost pc is the first. */
static __always_inline void ku_start(struct ku_walk *w)
{
    w->user.depth = 1;
    w->user.pcs[0] = w->ip;
    w->user.outcome = KU_FRAME_LIMIT;
    w->map_start = w->map_end = 0;
    w->bp_known = 1;
    w->fp_frames = 0;
    w->unloaded = 0;
    w->unloaded_frames = 0;
    w->ask_file = 0;
    w->steps = 0;
}

/* Up to KU_STEPS more frames of the user stack into w->user, with the mappings of `owner` (the process,
 * or the parent whose address space a fork child still runs in). KU_GO_ON: more to walk; else how the
 * walk ended. */
static __always_inline int ku_walk_some(struct ku_walk *w, u32 owner)
{
    struct ku_proc_maps *pm = ku_maps_of(owner);
    if (!pm)
        return KU_NO_MAPPING;
#pragma clang loop unroll(disable)
    for (int i = 0; i < KU_STEPS; i++) {
        u32 steps = w->steps;
        if (steps >= KU_FRAMES)
            return KU_FRAME_LIMIT;
        w->steps = steps + 1;
        int end = ku_step(w, pm, steps == 0);
        if (end != KU_GO_ON)
            return end;
    }
    return w->steps >= KU_FRAMES ? KU_FRAME_LIMIT : KU_GO_ON;
}

#endif
