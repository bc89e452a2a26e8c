#!/usr/bin/python3
"""netpack: kernel transmit-path latency per packet, from net_dev_queue to net_dev_xmit.

Traces the net:net_dev_queue and net:net_dev_xmit tracepoints, matched by skb and device. Each interval
prints per device: packets, bytes, mean, p50, p99 and max latency (from an in-kernel histogram);
--events adds one line per packet (length, device, latency). A packet queued by a task carries that
task's cgroup; one queued from a softirq (ACKs and errors sent while receiving, timers, forwarding)
carries none (cgroup id 0). --group-by cgroup splits each device's row per cgroup.
"""

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import CounterDeltas, Tool, quantity, table

EXAMPLES = [
    ("netpack", "per-device transmit latency summary, every second"),
    ("netpack 5 12", "5-second summaries for one minute"),
    ("netpack --dev eth0", "device eth0 only"),
    ("netpack --events", "also one line per packet: length and latency"),
    ("netpack --min-us 100", "only the packets that waited 100 us or more (implies --events)"),
    ("netpack --json", "NDJSON rows per device and interval, for the app"),
    ("netpack --cgroup lab/job-7 -g cgroup", "packets sent by one cgroup v2 group and those below, per group"),
]


def device_name(text: str) -> str:
    """--dev: the kernel's rules for an interface name (dev_valid_name): 1..15 bytes, not . or .., no /,
    : or white space."""
    if (not text or len(text.encode()) > 15 or text in (".", "..") or any(c in "/:" or c.isspace() for c in text)
            or not text.isprintable()):
        raise argparse.ArgumentTypeError(f"not a network device name: {text!r}")
    return text


tool = Tool("netpack", __doc__.strip().splitlines()[0], EXAMPLES,   # arguments: registry/entries/netpack.py
            checks={"dev": device_name})
args = tool.parse_args()
args.events = args.events or bool(args.min_us)

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_dev=args.dev, min_ns=round(args.min_us * 1e3) if args.min_us else None)
if args.events:
    cflags.append("-DEVENTS=1")
by_cgroup = args.group_by == "cgroup"
if by_cgroup:
    cflags.append("-DBY_CGROUP=1")
b = tool.load(cflags)
start, events, epoch = b["start"], b["events"], b["epoch"]
stats_deltas = CounterDeltas(b["stats"], tgid_of=None)
hist_deltas = CounterDeltas(b["hist"], tgid_of=None)
# Opened even without --events: polling it is what paces the loop. Until it is open the kernel drops
# what it submits, so tracing starts here for the totals too: what came before is read and set aside,
# and queue entries made while the xmit probe was not attached yet are forgotten.
events.open_perf_buffer(lambda cpu, data, size: on_event(data), page_cnt=128,
                        lost_cb=tool.lost_callback("events"), wakeup_events=tool.wakeup_events())
stats_deltas.step()
hist_deltas.step()
start.clear()
reused_seen = [sum(b["reused"][0])]
epoch[epoch.Key(0)] = epoch.Leaf(1)
tool.meta(events=args.events, histogram="quarter-octave", len_includes="link-layer header (as skb->len)",
          group_by=args.group_by, cgroup_of="the queuing task; 0 for a packet queued in a softirq")
tool.say(f"Tracing packet queue -> xmit latency{' on ' + args.dev if args.dev else ''}... Ctrl-C to end.")


# --- latency histogram ------------------------------------------------------------------------------
def slot_range(slot: int) -> tuple[int, int]:
    """The ns range of a quarter-octave bucket (see latency_slot() in bpf/netpack.c)."""
    if slot < 4:
        return slot, slot
    octave, quarter = divmod(slot, 4)
    return (4 + quarter) << (octave - 2), ((5 + quarter) << (octave - 2)) - 1


def percentile(buckets: dict[int, int], pct: float, max_ns: int) -> float:
    """The pct-th percentile in ns: the middle of the bucket it falls in, never above the max seen."""
    total = sum(buckets.values())
    rank = max(1, -(-total * pct // 100))   # ceil
    seen = 0
    for slot in sorted(buckets):
        seen += buckets[slot]
        if seen >= rank:
            lo, hi = slot_range(slot)
            return min((lo + hi) / 2, max_ns) if max_ns else (lo + hi) / 2
    return 0.0


def interval_maxes(interval: int) -> dict[tuple[str, int], int]:
    """Per (device, cgroup id: 0 unless --group-by cgroup), the longest latency of this interval (the
    BPF side keeps a max per epoch)."""
    maxes = {}
    for key, per_cpu in b["maxes"].items():
        best = max((v.max_ns for v in per_cpu if v.epoch == interval), default=0)
        if best:
            maxes[(key.name.decode(errors="replace"), key.cgid)] = best
    return maxes


def expire_unmatched(now_ns: int) -> int:
    """Delete queue entries older than --expire: packets the kernel dropped before xmit, or split
    (GSO) into new skbs. Returns how many were deleted."""
    horizon = now_ns - int(args.expire * 1e9)
    expired = 0
    for key, ts in list(start.items()):
        if ts.ts < horizon:
            try:
                del start[key]
                expired += 1
            except KeyError:
                pass   # transmitted meanwhile
    return expired


def reused_since_last() -> int:
    """Queue entries the kernel side found stale when their skb was queued again, since last asked."""
    total = sum(b["reused"][0])
    new, reused_seen[0] = total - reused_seen[0], total
    return new


# --- output ----------------------------------------------------------------------------------------
first_ts: list[int] = []


def on_event(data: Any) -> None:   # the ring buffer's pointer to a struct event_t
    ev = events.event(data)
    if tool.is_own(ev.pid):
        return      # the profiler's own, queued before the kernel knew it (bcctool/own.py)
    if not first_ts:
        first_ts.append(ev.ts_ns)
    dev = ev.dev.decode(errors="replace")
    cgroup = tool.cgroup_fields(ev.cgid)
    if tool.json:
        tool.emit_event(time_s=round((ev.ts_ns - first_ts[0]) / 1e9, 6), dev=dev, len=ev.len,
                        latency_us=round(ev.delta_ns / 1e3, 3), pid=ev.pid, **cgroup)
    else:
        print(f"len={ev.len:<7} latency={ev.delta_ns / 1e3:.2f} us  dev={dev}  pid={ev.pid or '-'}  "
              f"cgroup={cgroup['cgroup'] or '-'}",
              flush=True)


last_tick = [time.monotonic()]
# the table's columns: the registry's labels and units (registry/entries/netpack.py)
COLUMNS = tool.fields("dev", *(("cgroup",) if by_cgroup else ()), "packets", "bytes", "avg_us", "p50_us", "p99_us",
                      "max_us")


def on_tick() -> None:
    now = time.monotonic()
    elapsed, last_tick[0] = max(now - last_tick[0], 1e-9), now
    interval = tool.interval_index
    stats = stats_deltas.step()
    buckets: dict[tuple[str, int], dict[int, int]] = {}
    for (name, cgid, slot), delta in hist_deltas.step().items():
        buckets.setdefault((name.decode(errors="replace"), cgid), {})[slot] = delta["count"]
    maxes = interval_maxes(interval)
    # Read first, then open the next max window (as sysnest does): only a packet in the few microseconds
    # between the two is missed by the max; the other order would drop the whole window's max on any CPU
    # that sends a packet between them.
    epoch[epoch.Key(0)] = epoch.Leaf(interval + 1)
    unmatched = expire_unmatched(time.monotonic_ns()) + reused_since_last()
    rows = []
    for (name, cgid), d in stats.items():
        key = (name.decode(errors="replace"), cgid)
        mx = maxes.get(key, 0)
        rows.append({"dev": key[0], **(tool.cgroup_fields(cgid) if by_cgroup else {}),
                     "packets": d["packets"], "bytes": d["bytes"],
                     "avg_us": round(d["total_ns"] / d["packets"] / 1e3, 3) if d["packets"] else 0.0,
                     "p50_us": round(percentile(buckets.get(key, {}), 50, mx) / 1e3, 3),
                     "p99_us": round(percentile(buckets.get(key, {}), 99, mx) / 1e3, 3),
                     "max_us": round(mx / 1e3, 3)})
    rows.sort(key=lambda r: r["packets"], reverse=True)
    packets = sum(r["packets"] for r in rows)
    devices = len({r["dev"] for r in rows})
    tool.set_lost_total("start_map_full", sum(b["start_full"][0]))
    tool.set_lost_total("stats_map_full", sum(b["stats_full"][0]))
    if tool.json:
        tool.emit("summary", packets=packets, per_sec=round(packets / elapsed, 1), devices=devices,
                  unmatched=unmatched, interval_s=round(elapsed, 3))
        for r in rows:
            tool.emit("row", **r)
        return
    print(f"\n[{time.strftime('%H:%M:%S')}] {packets:,} packets ({quantity(packets / elapsed, '/s')}) on {devices} "
          f"device{'s' if devices != 1 else ''}" + (f", {unmatched} queued but not sent" if unmatched else ""))
    if not rows:
        return
    # a packet queued in a softirq has no cgroup
    print(table(COLUMNS, [{**r, "cgroup": r.get("cgroup") or "(softirq)"} for r in rows]))


# --- loop ------------------------------------------------------------------------------------------
tool.poll_until_stopped(on_tick=on_tick, tick=args.interval)
tool.finish()
