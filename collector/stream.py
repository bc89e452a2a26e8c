"""A stream: the batches of one (host, run_id, source), with its totals and the sequences still missing,
as the API, the dashboard, /metrics and each POST's answer show it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MISSING_LISTED = 1000  # sequences listed per stream; the count is always exact
# the streams table's columns that make a Stream, in this order (see schema.streams)
TOTALS = ("batches", "records", "received", "highest", "lowest", "dropped", "first_seen", "last_seen", "legacy",
          "token_name")


@dataclass
class Stream:
    host: str
    run_id: str
    source: str
    batches: int = 0
    records: int = 0
    received: int = 0  # distinct sequences
    highest: int = -1
    lowest: int = 0
    dropped: int = 0
    first_seen: float = 0.0
    last_seen: float = 0.0
    legacy: bool = False
    token_name: str | None = None
    gaps: list[tuple[int, int]] = field(default_factory=list)  # inclusive ranges, ascending

    @classmethod
    def from_row(cls, host: str, run_id: str, source: str, totals: Sequence,
                 gap_rows: Sequence[Sequence[int]] = ()) -> Stream:
        """From the streams row's TOTALS, as any driver returns them, and its first gap rows (lo, hi)."""
        n, recs, received, highest, lowest, dropped, first_seen, last_seen, legacy, token_name = totals
        return cls(host, run_id, source, int(n), int(recs), int(received), int(highest), int(lowest), int(dropped),
                   float(first_seen), float(last_seen), bool(legacy), token_name,
                   gaps=[(int(lo), int(hi)) for lo, hi in gap_rows])

    @property
    def missing_count(self) -> int:
        return self.highest + 1 - self.received

    def missing(self, limit: int = MISSING_LISTED) -> list[int]:
        out: list[int] = []
        for lo, hi in self.gaps:
            take = min(hi - lo + 1, limit - len(out))
            out.extend(range(lo, lo + take))
            if len(out) >= limit:
                break
        return out

    def as_dict(self) -> dict:
        missing = self.missing()
        return {"host": self.host, "run_id": self.run_id, "source": self.source, "batches": self.batches,
                "records": self.records, "highest": self.highest, "received": self.received,
                "missing_count": self.missing_count, "missing": missing,
                "missing_truncated": len(missing) < self.missing_count,
                "missing_ranges": [list(g) for g in self.gaps[:MISSING_LISTED]], "dropped": self.dropped,
                "first_seen": self.first_seen, "last_seen": self.last_seen, "legacy": self.legacy,
                "token_name": self.token_name}
