"""A saved session: every record of every metric of a run, one NDJSON line each, in the order they
arrived — the records exactly as the metrics printed them (each names its metric, kind, interval and ts;
each metric's meta first). `--headless --record FILE` or the window's Record button writes one; the
window opens it later (File: Open session, or `main_app.py --open FILE`) with no root, BPF or collector,
and every tab, chart, table and flame graph is rebuilt from the records, as perf.data is by Hotspot.
Plain NDJSON, so `jq` and `grep` read it too. No Qt here.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterable

from client.wire import is_record

# what a session file is called, for the file dialogs that open one
SESSION_FILES = "Sessions (*.ndjson *.jsonl);;All files (*)"


class SessionError(Exception):
    """One line: why a file is not a session."""


class SessionWriter:
    """Appends batches of records to FILE on a thread of its own, so a slow disk never stalls the caller.
    The file is created at once (a bad path fails here, as OSError); close() writes what is queued."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = open(path, "w", encoding="utf-8")     # noqa: SIM115 - closed by close(), on the thread's end
        self.written = 0
        self.error = ""
        self._queue: queue.SimpleQueue[list[dict] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="session-writer", daemon=True)
        self._thread.start()

    def write(self, records: Iterable[dict]) -> None:
        self._queue.put(list(records))

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while (batch := self._queue.get()) is not None:
                if not self.error:
                    self.file.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in batch))
                    self.written += len(batch)
        except OSError as e:
            self.error = f"recording stopped: {e.strerror or e} ({self.path})"
        finally:
            try:
                self.file.close()
            except OSError as e:
                self.error = self.error or f"recording stopped: {e.strerror or e} ({self.path})"


def read_session(path: str, known: Iterable[str]) -> tuple[dict[str, list[dict]], int]:
    """({metric: its records in order}, lines skipped for a metric this registry lacks). A file that is
    not a session raises SessionError with the first bad line's number."""
    known = set(known)
    by_metric: dict[str, list[dict]] = {}
    skipped = 0
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    raise SessionError(f"{path}: line {number} is not JSON") from None
                if not is_record(record):
                    raise SessionError(f"{path}: line {number} is not a metric's record")
                if record["metric"] in known:
                    by_metric.setdefault(record["metric"], []).append(record)
                else:
                    skipped += 1
    except OSError as e:
        raise SessionError(f"cannot open {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise SessionError(f"{path}: not a text file") from None
    if not by_metric:
        raise SessionError(f"{path}: no records of any known metric")
    return by_metric, skipped
