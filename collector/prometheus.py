"""GET /metrics in the Prometheus text exposition format (version 0.0.4). Counters come from the
database, so every server process behind a load balancer reports the same, lab-wide values."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collector.compaction import COUNTERS
from collector.rejections import REASONS
from collector.stream import Stream

if TYPE_CHECKING:
    from collector.push_targets import PushStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def _family(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def render(batches: int, records: int, counters: dict[str, int], streams: list[Stream]) -> str:
    lines: list[str] = []
    _family(lines, "collector_batches_total", "counter", "Batches stored (a retried batch counts once).")
    lines.append(f"collector_batches_total {batches}")
    _family(lines, "collector_records_total", "counter", "Metric records stored.")
    lines.append(f"collector_records_total {records}")
    _family(lines, "collector_duplicates_total", "counter", "Batches received again (same batch_id), acknowledged, not stored.")
    lines.append(f"collector_duplicates_total {counters.get('duplicates', 0)}")
    _family(lines, "collector_rejected_total", "counter", "Requests to /data rejected, by reason.")
    for reason in REASONS:
        lines.append(f"collector_rejected_total{_labels(reason=reason)} {counters.get('rejected:' + reason, 0)}")
    _family(lines, "collector_retention_records_total", "counter",
            "Records retention took away: stack records merged into buckets, deleted for age, deleted by the size bound.")
    for action in ("merged", "expired", "evicted"):
        lines.append(f"collector_retention_records_total{_labels(action=action)} {counters.get(COUNTERS[action], 0)}")
    _family(lines, "collector_missing_sequences", "gauge", "Sequences missing across all streams.")
    lines.append(f"collector_missing_sequences {sum(s.missing_count for s in streams)}")
    per_stream = [
        ("collector_stream_batches", "gauge", "Batches stored per stream.", lambda s: s.batches),
        ("collector_stream_records", "gauge", "Records stored per stream.", lambda s: s.records),
        ("collector_stream_missing_sequences", "gauge", "Sequences below the highest seen not received yet.",
         lambda s: s.missing_count),
        ("collector_stream_highest_sequence", "gauge", "Highest sequence received per stream.", lambda s: s.highest),
        ("collector_stream_client_dropped_records", "gauge", "Records the client reported it dropped.",
         lambda s: s.dropped),
        ("collector_stream_last_seen_timestamp_seconds", "gauge", "When the stream's last batch arrived.",
         lambda s: repr(s.last_seen)),
    ]
    for name, kind, help_text, value in per_stream:
        _family(lines, name, kind, help_text)
        for s in streams:
            lines.append(f"{name}{_labels(host=s.host, run_id=s.run_id, source=s.source)} {value(s)}")
    return "\n".join(lines) + "\n"


# PushStats' counts by outcome: (family, kind, help, field)
PUSH_FAMILIES = (
    ("collector_push_profiles_sent_total", "counter", "Profiles a push target accepted (this process's).", "sent"),
    ("collector_push_failures_total", "counter", "Push tries that failed: no answer, or not 2xx (this process's).",
     "failures"),
    ("collector_push_retries_total", "counter", "Push tries after a failed one (this process's).", "retries"),
    ("collector_push_profiles_dropped_total", "counter", "Profiles not queued for a push target: its queue was full.",
     "dropped"),
    ("collector_push_profiles_abandoned_total", "counter",
     "Profiles given up: retries spent, refused with a 4xx, or the collector stopping.", "abandoned"),
    ("collector_push_read_errors_total", "counter", "Push windows, or streams of one, whose profiles could not be read.",
     "read_errors"),
    ("collector_push_profiles_truncated_total", "counter",
     "Profiles pushed with only their window's newest records (too many to read).", "truncated"),
    ("collector_push_skipped_seconds_total", "counter",
     "Seconds of records not pushed: a window after an outage is max_window_s at most.", "skipped_s"),
    ("collector_push_queue_profiles", "gauge", "Profiles waiting to be sent to a push target.", "queued"),
    ("collector_push_last_success_timestamp_seconds", "gauge", "When a push target last accepted a profile.",
     "last_success"),
)


def render_push(stats: list[PushStats]) -> str:
    """The push targets' counts (collector/pusher.py); '' when none is configured."""
    if not stats:
        return ""
    lines: list[str] = []
    for name, kind, help_text, field in PUSH_FAMILIES:
        _family(lines, name, kind, help_text)
        for s in stats:
            lines.append(f"{name}{_labels(target=s.target.name, kind=s.target.kind)} {getattr(s, field)!r}")
    return "\n".join(lines) + "\n"
