#!/usr/bin/python3
"""tcpconnlat: trace active TCP connects and their latency, from SYN_SENT to ESTABLISHED.

Traces sock:inet_sock_set_state (no kprobes): the connecting task is recorded when a socket enters
SYN_SENT, and one event per connect is printed when it leaves it, established or failed.
"""

import os
import socket
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import LineTable, Tool
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("tcpconnlat", "every active TCP connect with its latency"),
    ("tcpconnlat -t", "with a Time (s) column"),
    ("tcpconnlat -p 181", "only connects made by process 181"),
    ("tcpconnlat --lport 40000", "only connects from local port 40000"),
    ("tcpconnlat -4", "IPv4 only (-6: IPv6 only)"),
    ("tcpconnlat -m 10", "only connects slower than 10 ms (failed ones always show)"),
    ("tcpconnlat --json 5 12", "NDJSON events and a summary every 5 s, for one minute"),
    ("tcpconnlat --cgroup lab/job-7", "only connects made in one cgroup v2 group and those below it"),
]
FAMILIES = {"4": socket.AF_INET, "6": socket.AF_INET6}
STATUS = {0: "ok", 1: "failed"}


tool = Tool("tcpconnlat", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/tcpconnlat.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(
    filter_pid=args.pid,
    filter_lport=args.lport,
    filter_family=FAMILIES[args.family] if args.family else None,
    min_ns=round(args.min_ms * 1e6) if args.min_ms else None,
)
b = tool.load(cflags)
events = b["events"]
start_full = b["start_full"]
# Opened before meta: until then the kernel drops what it submits, uncounted.
events.open_perf_buffer(lambda cpu, data, size: on_event(data), page_cnt=64,
                        lost_cb=tool.lost_callback("events"), wakeup_events=tool.wakeup_events())
tool.meta(time_origin="first_event", statuses=sorted(STATUS.values()))

# one line per connect, as it comes: the registry's labels and units (registry/entries/tcpconnlat.py)
connects = LineTable(tool.fields(*(("time_s",) if args.timestamp else ()), "pid", "comm", "ip", "saddr", "lport",
                                 "daddr", "dport", "latency_ms", "status"),
                     widths=(*((-9,) if args.timestamp else ()), -7, -16, 2, -26, 6, -26, 6, 9, -6))
tool.say(f"Tracing active TCP connects{f' from pid {args.pid}' if args.pid else ''}... Ctrl-C to end.")
tool.say(connects.heading())

# --- output ----------------------------------------------------------------------------------------
first_ts: list[int] = []
process_names = ProcessNames()   # a comm several processes share: "python3 (server.py)"
interval_lat: list[float] = []
interval_failed = [0]
last_tick = [time.monotonic()]


def address(family_id: int, raw: Any) -> str:   # raw: the event's address, a ctypes array
    data = bytes(raw)
    return socket.inet_ntop(socket.AF_INET, data[:4]) if family_id == socket.AF_INET else \
        socket.inet_ntop(socket.AF_INET6, data)


def on_event(data: Any) -> None:   # the perf buffer's pointer to a struct event_t
    ev = events.event(data)
    if tool.is_own(ev.pid):
        return      # the profiler's own, started before the kernel knew it (bcctool/own.py)
    if not first_ts:
        first_ts.append(ev.ts_ns)
    ip = 4 if ev.family == socket.AF_INET else 6
    record = {
        "time_s": round((ev.ts_ns - first_ts[0]) / 1e9, 6),
        "pid": ev.pid,
        "comm": ev.comm.decode(errors="replace"),
        **tool.cgroup_fields(ev.cgid),
        "ip": ip,
        "saddr": address(ev.family, ev.saddr),
        "lport": ev.lport,
        "daddr": address(ev.family, ev.daddr),
        "dport": ev.dport,
        "latency_ms": round(ev.delta_ns / 1e6, 6),
        "status": STATUS.get(ev.status, "failed"),
    }
    process_names.rename_rows([record])
    if record["status"] == "ok":
        interval_lat.append(record["latency_ms"])
    else:
        interval_failed[0] += 1
    if tool.json:
        tool.emit_event(**record)
        return
    # a timestamp keeps its milliseconds, as BCC's tcpconnlat -t prints it (a measure would read 12.137 as 12.1)
    print(connects.line({**record, "time_s": f"{record['time_s']:.3f}"}), flush=True)


def on_tick() -> None:
    """A JSON summary of the interval: established and failed connects, their mean and max latency."""
    now = time.monotonic()
    elapsed, last_tick[0] = now - last_tick[0], now
    tool.set_lost_total("start_map_full", sum(start_full[start_full.Key(0)]))
    lat = interval_lat
    tool.emit("summary", connects=len(lat), failed=interval_failed[0],
              avg_ms=round(sum(lat) / len(lat), 6) if lat else 0.0, max_ms=max(lat, default=0.0),
              interval_s=round(elapsed, 3))
    lat.clear()
    interval_failed[0] = 0


# --- loop ------------------------------------------------------------------------------------------
tool.poll_until_stopped(on_tick=on_tick, tick=args.interval)
tool.finish()
