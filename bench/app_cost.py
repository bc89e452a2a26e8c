"""Issue 27's benchmark: what the profiler costs a real server, side by side in one run.

Three loads on two servers the bench starts on loopback (bench/app_servers.py): PostgreSQL under
`pgbench -S -c 2 -j 2` (select-only) and under pgbench's default TPC-B-like read-write mix, and nginx
serving a 1 KiB file under `wrk --latency`. One round starts a row's profiler processes, waits until
they are attached and settled, runs the three loads one after the other, reads the processes' memory
and stops them. Rows:

- bare: nothing attached;
- floor: empty BPF programs on every probe the ten metrics attach at their defaults (as each metric's
  meta record lists them), one bench/probe_floor.py process per metric, as each metric holds its own;
- floor + least work: the same programs, each counting its event and, where the metric times its events
  (TIMED_PROBES), reading the clock: less than any tool of the ten's jobs can do, so the bound under
  the all-ten row;
- floor + least state: least work with, on those timed probes, the least per-thread state a tool timing
  spans keeps (bench/probe_floor.py's +state: the thread's time in task storage at a syscall, by tid in
  a hash at a switch or wakeup): nearer what the ten's timing jobs need, though not a strict bound
  (schparm keeps less per switch, BENCHMARKS.md section 11);
- each metric of config.METRICS alone at its defaults (--json, its output read as the app reads it);
- all ten at their defaults (metric_footprint.TEN: every metric but cpuprofile, which has its row);
- BCC's tools of the same jobs and bpftrace equivalents, where they run on this kernel: one that
  cannot start is a row saying why, not a missing row.

Rounds alternate (stats.bracketed): bare runs first, after every third row and last, and a row's
figures are its ratios to the bare rounds either side of it; a figure is the median of those ratios
over the repetitions, with their range. Per row and load: throughput, p99 latency, the machine's user
and system CPU (/proc/stat), each profiler process's CPU (utime + stime with its children's, per
second of load) and after the loads its PSS and private memory (smaps_rollup); then, in a separate pass
with kernel.bpf_stats_enabled (its two clock reads a program run are not in the timed rounds), each
BPF program's run time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import app_servers
import bpfwatch
import harness
import stats
from app_servers import Nginx, PgBench
from harness import Tracer
from metric_footprint import TEN, smaps_rollup_mb
from server_fixtures import PgCluster, private_pg_cluster
from stats import BenchError

import config
from bcctool.taskinfo import descendants
from host.proc_cost import cpu_seconds

BARE, FLOOR, ALL_TEN = "bare", "floor", "all ten"
FLOOR_WORK = "floor + least work"
FLOOR_STATE = "floor + least state"
# the probes whose events a metric times (the clock read at each: a latency, a run, a block, from one
# event to another); it counts or looks up on its other probes. The floor + least work row reads the
# clock on these and counts on every probe, and does nothing else.
TIMED_PROBES = {
    "sysnest": {"raw_tracepoint:sys_enter", "raw_tracepoint:sys_exit"},
    "tcpconnlat": {"tracepoint:sock:inet_sock_set_state"},
    "netpack": {"tracepoint:net:net_dev_queue", "tracepoint:net:net_dev_xmit"},
    "cpuschedrun": {"tracepoint:sched:sched_switch", "tracepoint:sched:sched_wakeup", "tracepoint:sched:sched_wakeup_new"},
    "biopwise": {"tracepoint:block:block_rq_issue", "tracepoint:block:block_rq_complete"},
    "offcpu": {"tracepoint:sched:sched_switch"},
    "schparm": {"tracepoint:sched:sched_switch"},
}
ALL_TEN_SAMPLING = "all ten in sampling modes"   # each in the mode the overhead budget switches it to
LOADS = {"pg_select": "PostgreSQL, pgbench -S (select-only)",
         "pg_rw": "PostgreSQL, pgbench default mix (TPC-B-like read-write)",
         "nginx": f"nginx, wrk -c {app_servers.WRK_CONNECTIONS} ({app_servers.PAGE_BYTES} B file)"}
MARKERS = [f"app_cost_{load}" for load in LOADS]
PG_SCALE = 10
BARE_EVERY = 3           # rows between two bare rounds
SETTLED_S = 1.0          # a peer is attached once its set of BPF programs has not changed for this long
BCC = "/usr/sbin"
# BCC's tools of the metrics' jobs (the metric each is compared with); those that need kprobes do not
# start here and are shown so
BCC_PEERS = {
    "BCC syscount -L": ([f"{BCC}/syscount-bpfcc", "-L"], "sysnest"),
    "BCC tcpconnlat": ([f"{BCC}/tcpconnlat-bpfcc"], "tcpconnlat"),
    "BCC tcplife": ([f"{BCC}/tcplife-bpfcc"], "tcpconnlat"),
    "BCC netqtop -n lo": ([f"{BCC}/netqtop-bpfcc", "-n", "lo"], "netpack"),
    "BCC runqlat": ([f"{BCC}/runqlat-bpfcc"], "cpuschedrun"),
    "BCC biolatency": ([f"{BCC}/biolatency-bpfcc"], "biopwise"),
    "BCC offcputime": ([f"{BCC}/offcputime-bpfcc"], "offcpu"),
    "BCC profile -F 49": ([f"{BCC}/profile-bpfcc", "-F", "49"], "cpuprofile"),
    "BCC memleak (kernel)": ([f"{BCC}/memleak-bpfcc"], "compmem"),
    "BCC cachestat": ([f"{BCC}/cachestat-bpfcc"], "cacheraw"),
}
# bpftrace's shipped tools of the same jobs, and one-liners on the tracepoints where the shipped tool
# needs kprobes; each prints a line once attached (BEGIN runs after every probe is attached)
BEGIN = 'BEGIN { printf("Tracing\\n"); } '
BPFTRACE_PEERS = {
    "bpftrace syscount.bt": (["/usr/sbin/syscount.bt"], "sysnest"),
    "bpftrace tcplife.bt": (["/usr/sbin/tcplife.bt"], "tcpconnlat"),
    "bpftrace connect latency": (["-e", BEGIN + "tracepoint:sock:inet_sock_set_state /args->newstate == 2/ "
                                  "{ @start[args->skaddr] = nsecs; } tracepoint:sock:inet_sock_set_state "
                                  "/args->oldstate == 2 && @start[args->skaddr]/ { @us = hist((nsecs - "
                                  "@start[args->skaddr]) / 1000); delete(@start[args->skaddr]); }"], "tcpconnlat"),
    "bpftrace page faults": (["-e", BEGIN + "software:page-faults:1 { @[comm, pid] = count(); }"], "pagefault"),
    "bpftrace runqlat.bt": (["/usr/sbin/runqlat.bt"], "cpuschedrun"),
    "bpftrace biolatency.bt": (["/usr/sbin/biolatency.bt"], "biopwise"),
    "bpftrace block latency": (["-e", BEGIN + "tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = "
                                "nsecs; } tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ "
                                "{ @us = hist((nsecs - @start[args->dev, args->sector]) / 1000); "
                                "delete(@start[args->dev, args->sector]); }"], "biopwise"),
    # offcputime.bt needs kprobes: the same job on the tracepoint, each block's kernel and user stack taken
    # at its switch out as offcpu takes them, its time summed per (stacks, comm) at its switch in
    "bpftrace off-CPU stacks": (["-e", BEGIN + "tracepoint:sched:sched_switch /args->prev_state & 3/ { "
                                 "@start[args->prev_pid] = nsecs; @ks[args->prev_pid] = kstack; "
                                 "@us[args->prev_pid] = ustack; } tracepoint:sched:sched_switch "
                                 "/@start[args->next_pid]/ { @t[@ks[args->next_pid], @us[args->next_pid], "
                                 "args->next_comm] = sum(nsecs - @start[args->next_pid]); "
                                 "delete(@start[args->next_pid]); } END { clear(@start); clear(@ks); clear(@us); }"],
                                "offcpu"),
    "bpftrace profile 49 Hz": (["-e", BEGIN + "profile:hz:49 { @[kstack, ustack, comm] = count(); }"], "cpuprofile"),
}


# the metrics' other modes of their costliest work (user stacks, compmem's allocations kept), each a row
# of its own: the numbers that choose a default (issue 28: compmem and offcpu at their defaults cost no
# more than with fp; issue 27: compmem sampled)
MODES = {**{f"{name} --user-stacks {mode}": (name, {"user_stacks": mode})
            for name in ("compmem", "offcpu", "cpuprofile") for mode in ("dwarf", "fp", "kernel")},
         **{f"compmem --sample-bytes {n}": ("compmem", {"sample_bytes": n}) for n in (0, 16384, 65536)},
         "offcpu --stack-every 1": ("offcpu", {"stack_every": 1})}


def mode_rows() -> dict[str, tuple[str, dict]]:
    """MODES whose values the metric offers and are not all its defaults (that is the metric's own row)."""
    out = {}
    for row, (name, values) in MODES.items():
        args = {a.name: a for a in config.get(name).args}
        offered = all(k in args and (not args[k].choices or v in args[k].choices) for k, v in values.items())
        if offered and any(args[k].default != v for k, v in values.items()):
            out[row] = (name, values)
    return out


def row_names() -> list[str]:
    """Every row but bare, in the order the tables show them."""
    return [FLOOR, FLOOR_WORK, FLOOR_STATE, *(spec.name for spec in config.METRICS), *mode_rows(), ALL_TEN, ALL_TEN_SAMPLING, *BCC_PEERS,
            *BPFTRACE_PEERS]


def job_of(row: str) -> str | None:
    """The metric a peer row does the job of."""
    peer = BCC_PEERS.get(row) or BPFTRACE_PEERS.get(row)
    return peer[1] if peer else None


def chosen(names: list[str], asked: str | None) -> list[str]:
    """names in their own order: all, or those in the comma-separated list asked for (--app-rows, --app-loads)."""
    return [name for name in names if name in set(asked.split(","))] if asked else list(names)


def load_names(app_loads: str | None) -> list[str]:
    """The loads a run measures: all of LOADS, or the comma-separated subset asked for."""
    return chosen(list(LOADS), app_loads)


# --- the profiler processes of a row -------------------------------------------------------------------
class Tool:
    """One process of a row: started, awaited until attached, its process tree's CPU and memory."""

    def __init__(self, name: str, argv: list[str], kind: str) -> None:
        self.name, self.kind = name, kind
        self.probes: list[dict] | None = None      # a metric's attached probes, from its meta record
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # BCC's tools print their header at once
        ready = self._meta if kind == "metric" else "ready" if kind == "floor" else (lambda line: True)
        self.tracer = Tracer(argv, ready, name=name, env=env)

    def _meta(self, line: str) -> bool:
        record = config.parse_ndjson(line)
        if record and record["kind"] == "meta":
            self.probes = record.get("probes") or []
            return True
        return False

    def wait_attached(self) -> None:
        """Until its ready line (a metric's meta record is printed once attached); for a peer, which may
        print before it attaches, also until its BPF programs stop changing. BenchError with the last
        line it printed when it exits first."""
        self.tracer.wait_ready()
        if self.kind != "peer":
            return
        seen, since, deadline = None, time.monotonic(), time.monotonic() + 120
        while True:
            if self.tracer.exited():
                self.tracer.stop()
                raise BenchError(self.last_words())
            ids = self.prog_ids()
            now = time.monotonic()
            if ids != seen:
                seen, since = ids, now
            elif ids and now - since >= SETTLED_S:
                break
            if now > deadline:
                raise BenchError(f"{self.name}: no BPF program attached after 120 s")
            time.sleep(0.2)
        # bpftrace runs on when a probe cannot attach, with what did (its BEGIN and END at least)
        skipped = next((line for line in self.tracer.tail if "could not attach" in line), None)
        if skipped:
            self.tracer.stop()
            raise BenchError(skipped.strip()[-300:])

    def last_words(self) -> str:
        lines = [line.strip() for line in self.tracer.tail if line.strip()]
        return lines[-1][-300:] if lines else f"exited with status {self.tracer.stop()}"

    def pids(self) -> list[int]:
        return descendants(self.tracer.proc.pid)

    def prog_ids(self) -> set[int]:
        return set().union(*(harness.prog_ids_of(pid) for pid in self.pids()))

    def cpu_s(self) -> float:
        return sum(cpu_seconds(pid, with_children=True) or 0.0 for pid in self.pids())

    def memory_mb(self) -> dict[str, float]:
        pss = private = 0.0
        for pid in self.pids():
            rollup = smaps_rollup_mb(pid) or {}
            pss += rollup.get("pss", 0.0)
            private += rollup.get("private_dirty", 0.0) + rollup.get("private_clean", 0.0)
        return {"pss": round(pss, 1), "private": round(private, 1)}


def floor_argv(metric: str, probes: list[str], work: bool, state: bool = False) -> list[str]:
    """bench/probe_floor.py on a metric's probes: empty programs, or (work) its least work on each, with
    (state) the least per-thread state on the probes it times."""
    if work:
        timed = "+state" if state else "+clock"
        probes = ["--work", *(f"{p}{timed}" if p in TIMED_PROBES.get(metric, ()) else p for p in probes)]
    return [harness.PYTHON, os.path.join(harness.BENCH, "probe_floor.py"), *probes]


def start_all(specs: list[tuple[str, list[str], str]]) -> list[Tool]:
    """The processes of a row, started at once (as the app's Start does) and attached."""
    tools = [Tool(*spec) for spec in specs]
    try:
        for tool in tools:
            tool.wait_attached()
    except BenchError:
        stop_all(tools)
        raise
    return tools


def stop_all(tools: list[Tool]) -> None:
    for tool in tools:
        tool.tracer.stop()


def machine_jiffies() -> tuple[int, int, int]:
    """(user + nice, system + irq + softirq, all) clock ticks of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return v[0] + v[1], v[2] + v[5] + v[6], sum(v)


# --- the bench ----------------------------------------------------------------------------------------
class AppCost:
    """The servers, the rows' commands, and one round of a row."""

    def __init__(self, pg: PgCluster, workdir: str, nginx: Nginx, seconds: float, settle: float,
                 loads: list[str]) -> None:
        self.pgbench = PgBench(pg, workdir)
        self.nginx, self.seconds, self.settle, self.loads = nginx, seconds, settle, loads
        self.commands: dict[str, list[tuple[str, list[str], str]]] = {}
        self.unavailable: dict[str, str] = {}
        self.floor_probes: dict[str, list[str]] = {}
        self.quiet = bpfwatch.Quiet(syscalls_only=False, retries=0)

    def load(self, name: str) -> dict:
        if name == "nginx":
            return app_servers.wrk_load(self.nginx.url, self.seconds)
        return self.pgbench.run(self.seconds, select_only=name == "pg_select")

    def prepare(self, rows: list[str]) -> None:
        """Each row's commands; the floor's probes from the ten's meta records (one start of the ten);
        peers that cannot start here are set aside with the reason they gave."""
        metrics = {spec.name: (spec.name, harness.metric_argv(spec), "metric") for spec in config.METRICS}
        modes = mode_rows()
        for row in rows:
            if row in metrics:
                self.commands[row] = [metrics[row]]
            elif row in modes:
                name, values = modes[row]
                self.commands[row] = [(row, harness.metric_argv(config.get(name), **values), "metric")]
        if ALL_TEN in rows:
            self.commands[ALL_TEN] = [metrics[name] for name in TEN]
        if ALL_TEN_SAMPLING in rows:
            self.commands[ALL_TEN_SAMPLING] = [
                (name, harness.metric_argv(config.get(name), **config.get(name).sampling_changes({})), "metric")
                for name in TEN]
        if FLOOR in rows or FLOOR_WORK in rows or FLOOR_STATE in rows:
            self.floor_probes = self.probes_of_ten([metrics[name] for name in TEN])
            for row, label, work, state in ((FLOOR, "floor of", False, False), (FLOOR_WORK, "least work of", True, False),
                                            (FLOOR_STATE, "least state of", True, True)):
                self.commands[row] = [(f"{label} {name}", floor_argv(name, probes, work=work, state=state), "floor")
                                      for name, probes in self.floor_probes.items()]
        bpftrace = shutil.which("bpftrace")
        for row in rows:
            if row in BCC_PEERS:
                argv = BCC_PEERS[row][0]
                if not os.path.exists(argv[0]):
                    self.unavailable[row] = f"{argv[0]} is not installed (bpfcc-tools)"
                    continue
            elif row in BPFTRACE_PEERS:
                if not bpftrace:
                    self.unavailable[row] = "bpftrace is not installed (scripts/apt-packages.txt lists it)"
                    continue
                argv = [bpftrace, "-B", "line", *BPFTRACE_PEERS[row][0]]
            else:
                continue
            try:
                stop_all(start_all([(row, argv, "peer")]))
                self.commands[row] = [(row, argv, "peer")]
            except BenchError as exc:
                self.unavailable[row] = str(exc)
                harness.log(f"  {row} does not run here: {exc}")

    def probes_of_ten(self, specs: list[tuple[str, list[str], str]]) -> dict[str, list[str]]:
        """{metric: ["TYPE:NAME", ...]} each of the ten attaches at its defaults, from its meta record."""
        tools = start_all(specs)
        stop_all(tools)
        out = {}
        for tool in tools:
            out[tool.name] = [f"{p['type']}:{p['name']}" for p in tool.probes or []]
            if any(p["type"] not in ("tracepoint", "raw_tracepoint", "perf_event") for p in tool.probes or []):
                raise BenchError(f"{tool.name} attaches a probe the floor cannot copy: {tool.probes}")
        return out

    def round(self, row: str, bpf_stats: bool = False) -> dict:
        """One round: the row's processes started and settled, the three loads, their memory, stopped."""
        tools = start_all(self.commands.get(row, []))
        try:
            time.sleep(self.settle)
            loads = {name: self.measure(name, tools, bpf_stats) for name in self.loads}
            for tool in tools:
                if tool.tracer.exited():
                    raise BenchError(f"{tool.name} exited during the loads: {tool.last_words()}")
            memory = {tool.name: tool.memory_mb() for tool in tools}
        finally:
            stop_all(tools)
        return {"loads": loads, "memory": memory}

    def measure(self, load: str, tools: list[Tool], bpf_stats: bool) -> dict:
        """One load under the row's processes: its result, the machine's CPU, each process's CPU; with
        bpf_stats, each BPF program's run time instead of a timed figure."""
        cpu_before = {tool.name: tool.cpu_s() for tool in tools}
        machine_before, started = machine_jiffies(), time.monotonic()
        if bpf_stats:
            by_prog = {pid: tool.name for tool in tools for pid in tool.prog_ids()}
            with bpfwatch.BpfStats(set(by_prog)) as watched:
                result = self.load(load)
        else:
            result = self.quiet.run(lambda: self.load(load), [tool.tracer.proc.pid for tool in tools])
        elapsed = time.monotonic() - started
        user, system, total = (after - before for after, before in zip(machine_jiffies(), machine_before, strict=True))
        result.update(user_pct=100 * user / total, sys_pct=100 * system / total,
                      cpu_ms_per_s={tool.name: 1000 * (tool.cpu_s() - cpu_before[tool.name]) / elapsed
                                    for tool in tools})
        if bpf_stats:
            result["programs"] = sorted(
                ({"tool": by_prog[pid], "name": s["name"], "runs_per_s": round(s["runs"] / elapsed, 1),
                  "ns_per_run": s["ns_per_run"], "ms_per_s": round(s["runs"] * (s["ns_per_run"] or 0) / 1e6 / elapsed, 3)}
                 for pid, s in watched.result.items()), key=lambda p: -p["ms_per_s"])
        return result


def run(quick: bool = False, reps: int | None = None, app_rows: str | None = None,
        app_loads: str | None = None) -> dict:
    reps = reps or (3 if quick else 5)
    loads = load_names(app_loads)
    seconds, settle = (2.0, 1.0) if quick else (8.0, 2.0)
    rows = chosen(row_names(), app_rows)
    workdir = tempfile.mkdtemp(prefix="bench-app-cost-")
    try:
        with private_pg_cluster(durable=True) as pg, Nginx() as nginx:
            bench = AppCost(pg, workdir, nginx, seconds, settle, loads)
            bench.pgbench.init(PG_SCALE)
            harness.log(f"app cost: preparing {len(rows)} rows (the ten's probes for the floor, peers that start here)")
            bench.prepare(rows)
            timed = [r for r in rows if r in bench.commands]
            harness.log(f"app cost: {reps} repetitions of {len(timed)} rows and bare every {BARE_EVERY}, "
                        f"{len(loads)} loads of {seconds:g} s each a round")
            values, around = stats.bracketed(timed, BARE, lambda row, rep: bench.round(row), reps, BARE_EVERY,
                                             harness.log)
            bpf = {}
            for row in timed:
                try:
                    bpf[row] = bench.round(row, bpf_stats=True)["loads"]
                except BenchError as exc:
                    harness.log(f"  bpf_stats pass of {row}: {exc}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table_rows = [summarize(BARE, values[BARE], None, None, loads)]
    for row in rows:
        if row in bench.unavailable:
            table_rows.append({"row": row, "job_of": job_of(row), "unavailable": bench.unavailable[row]})
        elif row in values:
            table_rows.append(summarize(row, values[row], around[row], bpf.get(row), loads))
    return {"title": "What the profiler costs a real server", "reps": reps, "seconds": seconds,
            "pg_scale": PG_SCALE, "pg_clients": app_servers.PG_CLIENTS, "bare_every": BARE_EVERY,
            "loads": {name: LOADS[name] for name in loads},
            "floor_probes": bench.floor_probes, "rows": table_rows, "interference": bench.quiet.note(),
            "targets": targets_of(table_rows)}


def summarize(row: str, got: list, around: list | None, bpf: dict | None, loads: list[str]) -> dict:
    """A row's figures per load: medians (and ranges) of its ratios to the bare rounds around it."""
    out: dict = {"row": row, "job_of": job_of(row), "loads": {}}
    pairs = [(v, b) for v, b in zip(got, around or [[]] * len(got), strict=True) if v is not None]
    done = [v for v, _ in pairs]
    for load in loads:
        runs = [v["loads"][load] for v in done]
        fig = {key: stats.summary([r[key] for r in runs], 2) for key in ("per_s", "p99_ms", "user_pct", "sys_pct")}
        fig["cpu_ms_per_s"] = stats.summary([sum(r["cpu_ms_per_s"].values()) for r in runs], 1)
        fig["cpu_ms_per_s_each"] = {name: stats.summary([r["cpu_ms_per_s"].get(name) for r in runs], 1)
                                    for name in (runs[0]["cpu_ms_per_s"] if runs else {})}
        if around is not None:
            ratios = {key: [v["loads"][load][key] / statistics.mean(b["loads"][load][key] for b in bases)
                            for v, bases in pairs if bases] for key in ("per_s", "p99_ms")}
            fig["per_s_ratio"], fig["p99_ms_ratio"] = (stats.summary(ratios[key], 3) for key in ("per_s", "p99_ms"))
            fig["loss_pts"] = stats.summary([100 - 100 * r for r in ratios["per_s"]], 1)
        if bpf and load in bpf:
            fig["bpf_ms_per_s"] = round(sum(p["ms_per_s"] for p in bpf[load]["programs"]), 3)
            fig["programs"] = bpf[load]["programs"]
        out["loads"][load] = fig
    memory = [v["memory"] for v in done]
    out["pss_mb"] = stats.summary([sum(m["pss"] for m in mem.values()) for mem in memory], 1)
    out["private_mb"] = stats.summary([sum(m["private"] for m in mem.values()) for mem in memory], 1)
    out["pss_mb_each"] = {name: stats.summary([m[name]["pss"] for m in memory if name in m], 1)
                          for name in (memory[0] if memory else {})}
    return out


# --- targets and tables -----------------------------------------------------------------------------
TARGET_LOAD = "pg_select"


def targets_of(rows: list[dict]) -> list[dict]:
    """Issue 27's targets on PostgreSQL select-only: all ten lose at most 1.5x the floor's throughput,
    each metric alone at most 1.5x the floor's loss plus one point, and no more than its BCC peer."""
    def loss(row: str) -> float | None:
        fig = next((r for r in rows if r["row"] == row and "loads" in r), {}).get("loads", {}).get(TARGET_LOAD, {})
        return (fig.get("loss_pts") or {}).get("median")

    # a floor that gained throughput lost nothing measurable: its loss counts as 0, not as a credit
    floor = None if loss(FLOOR) is None else max(loss(FLOOR), 0.0)
    out = []
    limit = None if floor is None else round(1.5 * floor, 1)
    out.append(_within(f"{ALL_TEN} at their defaults: throughput loss on {LOADS[TARGET_LOAD]}",
                       "<= 1.5x the floor's loss", loss(ALL_TEN), limit))
    # not a target of the metrics: where the least any tool of the ten's jobs does already stands
    out.append(_within(f"the bound under it, {FLOOR_WORK} (a count per event, the clock where the ten time "
                       f"them): throughput loss on {LOADS[TARGET_LOAD]}", "<= 1.5x the floor's loss",
                       loss(FLOOR_WORK), limit))
    out.append(_within(f"nearer the ten's jobs, {FLOOR_STATE} (least work and the per-thread time a tool timing "
                       f"spans keeps): throughput loss on {LOADS[TARGET_LOAD]}", "<= 1.5x the floor's loss",
                       loss(FLOOR_STATE), limit))
    for spec in config.METRICS:
        limit = None if floor is None else round(1.5 * floor + 1, 1)
        out.append(_within(f"{spec.name} alone: throughput loss on {LOADS[TARGET_LOAD]}",
                           "<= 1.5x the floor's loss + 1 point", loss(spec.name), limit))
    for peer, (_, metric) in BCC_PEERS.items():
        peer_loss = loss(peer)
        if peer_loss is not None:
            out.append(_within(f"{metric} alone against {peer}: throughput loss on {LOADS[TARGET_LOAD]}",
                               f"<= {peer}'s loss", loss(metric), peer_loss))
    return out


def _within(name: str, goal: str, measured: float | None, limit: float | None) -> dict:
    if limit is None:
        return stats.target(name, goal, None, 0, higher_is_better=False)
    found = stats.target(name, f"{goal} ({limit:g} points)", measured, limit, higher_is_better=False, unit=" points")
    if measured is not None:
        found["margin"] = f"{measured - limit:+.1f} points"
    return found


def _bpf_cell(fig: dict) -> str:
    if fig.get("bpf_ms_per_s") is None:
        return "n/a"
    top = (fig.get("programs") or [None])[0]
    heaviest = (f"; heaviest {top['name']} ({top['tool']}) {top['ns_per_run'] or 0:,.0f} ns x {top['runs_per_s']:,.0f}/s"
                if top and top["ms_per_s"] else "")
    return f"{fig['bpf_ms_per_s']:,.1f} ms/s{heaviest}"


def tables(result: dict) -> dict[str, str]:
    out = {f"app_cost_{load}": "(not measured in this run: `--app-loads` left it out)" for load in LOADS}
    for load, title in result["loads"].items():
        lines = []
        for r in result["rows"]:
            label = f"{r['row']} ({r['job_of']}'s job)" if r.get("job_of") else r["row"]
            if r.get("unavailable"):
                lines.append([label, f"does not run here: {r['unavailable']}", *[""] * 8])
                continue
            fig = r["loads"][load]
            machine = f"{stats.fmt(fig['user_pct'], ' %', 0)} / {stats.fmt(fig['sys_pct'], ' %', 0)}"
            if r["row"] == BARE:
                lines.append([label, stats.fmt(fig["per_s"], "/s"), "—", "—", stats.fmt(fig["p99_ms"], " ms", 2), "—",
                              machine, "—", "—", "—"])
                continue
            lines.append([label, stats.fmt(fig["per_s"], "/s"), stats.fmt(fig.get("per_s_ratio"), "x", 3),
                          stats.fmt(fig.get("loss_pts"), " pts", 1), stats.fmt(fig["p99_ms"], " ms", 2),
                          stats.fmt(fig.get("p99_ms_ratio"), "x", 2), machine,
                          stats.fmt(fig["cpu_ms_per_s"], " ms/s", 1),
                          f"{stats.fmt(r['pss_mb'], ' MB', 0)} / {stats.fmt(r['private_mb'], ' MB', 0)}",
                          _bpf_cell(fig)])
        table = stats.md_table([f"{title}, {result['seconds']:g} s a round", "throughput", "vs bare", "loss",
                                "p99 latency", "p99 vs bare", "machine user / sys CPU", "profiler CPU",
                                "profiler PSS / private", "BPF run time (bpf_stats pass)"], lines)
        out[f"app_cost_{load}"] = table + bpfwatch.quiet_note(result)
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
