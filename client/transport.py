"""Records -> batches -> the collector, on two background threads, so no caller ever waits on the network.

submit() appends a metric's records to a bounded in-memory deque per source (the stage the original
design kept in the GUI): the NDJSON lines the script printed when the caller has them, which go into
the batch as they are, else the records, encoded when cut. The builder thread cuts batches by size
(records, bytes) and by time, gives each its batch_id and its sequence (per run_id and source,
gapless from 0) and writes it to the durable outbox before anything is sent. The sender thread posts
the outbox's oldest batch, deletes it on a 2xx, and on a failure backs off exponentially with jitter,
keeping the batch for the next try — so batches leave in creation order, a retry is the same batch,
and a restarted client replays what an earlier one left. Every record that is not delivered is counted
under a reason (docs/pipeline.md).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import random
import socket
import sqlite3
import struct
import threading
import time
import urllib.parse
import uuid
from collections import deque
from typing import Any

import requests

from client import statedir
from client.outbox import Outbox
from client.wire import batch_head, batch_json, may_be_nonfinite

log = logging.getLogger(__name__)

TUNING: dict[str, Any] = {
    "batch_records": 2000,        # a batch holds at most this many records ...
    "batch_bytes": 1_000_000,     # ... and at most this much JSON (collectors limit body size)
    "flush_interval": 1.0,        # seconds: a source's records wait at most this long for a batch
    "max_buffered": 200_000,      # records per source in memory; beyond it the oldest spill (counted)
    "backoff_base": 0.5,          # seconds before the first retry; doubles per failure ...
    "backoff_max": 15.0,          # ... up to this (and the retry pass is this often during an outage)
    "connect_timeout": 3.0,
    "timeout": 10.0,              # seconds for the collector's answer
    "outbox_max_bytes": 256 * 2**20,
    "outbox_max_age": 7 * 86400.0,
    "gzip_min_bytes": 16_384,     # send gzip above this size, once the collector advertises it
    "probe_interval": 10.0,       # when idle, check the collector is reachable this often
}

ENCODE_RUN = 250

# Statuses that say the client is misconfigured (token, URL), not that the batch is bad: the batch
# is kept and retried at the slowest pace, so fixing the token or URL delivers everything.
HOLD_STATUSES = (401, 403, 404, 405)
RETRY_STATUSES = (408, 429)


class _Source:
    """What one metric has sent through the transport."""

    def __init__(self, max_buffered: int) -> None:
        self.buffer: deque[dict | bytes] = deque()     # records, or their JSON lines
        self.max_buffered = max_buffered
        self.submitted = 0
        self.spilled_since_batch = 0     # goes into the next batch's "dropped"
        self.created_batches = 0
        self.sent_batches = 0
        self.sent_records = 0
        self.dropped = 0
        self.ended = False               # its metric ended: cut what it left now, not at the next flush

    def add(self, records: list[dict] | list[bytes]) -> int:
        """Append; returns how many of the oldest records spilled to stay within the bound."""
        self.submitted += len(records)
        self.buffer.extend(records)
        spill = len(self.buffer) - self.max_buffered
        for _ in range(max(0, spill)):
            self.buffer.popleft()
        return max(0, spill)


class Transport:
    def __init__(self, url: str | None, token: str | None = None, outbox_path: str | None = None,
                 host: str | None = None, run_id: str | None = None, **tuning: Any) -> None:
        unknown = set(tuning) - set(TUNING)
        if unknown:
            raise TypeError(f"unknown transport tuning: {', '.join(sorted(unknown))}")
        self.tuning = {**TUNING, **tuning}
        self.host = host or socket.gethostname()
        self.run_id = run_id or uuid.uuid4().hex
        self.outbox_path = outbox_path or f"{statedir.state_dir()}/outbox.sqlite"
        self._outbox = Outbox(self.outbox_path, int(self.tuning["outbox_max_bytes"]),
                              float(self.tuning["outbox_max_age"]))
        self._url, self._token = base_url(url), token
        self._cond = threading.Condition()            # guards everything below; held for microseconds
        self._sources: dict[str, _Source] = {}
        self._drops: dict[str, int] = {}              # reason -> records
        self._dropped_batches = 0
        self._last_error = ""
        self._reachable: bool | None = None
        self._gzip_ok = False
        self._pending: dict[str, tuple[int, int]] = self._outbox.pending()
        self._next_flush = time.monotonic() + self.tuning["flush_interval"]
        self._closing = False
        self._builder_done = threading.Event()
        self._wake_sender = threading.Event()
        self._close_deadline = float("inf")
        self._failures = 0
        self._retry_at = 0.0
        self._last_probe = -float("inf")
        self._builder = threading.Thread(target=self._build_loop, name="transport-builder", daemon=True)
        self._sender = threading.Thread(target=self._send_loop, name="transport-sender", daemon=True)
        self._builder.start()
        self._sender.start()

    # --- the caller's side ---------------------------------------------------------------------------
    def submit(self, metric: str, records: list[dict], lines: list[bytes] | None = None) -> None:
        """Queue records of one metric for sending; never blocks on the network or the disk. lines: the
        records' NDJSON lines as the script printed them, one a record in the same order; they are sent
        as they are, and the records are not kept."""
        if lines is not None:
            if len(lines) != len(records):
                raise ValueError(f"{len(lines)} lines for {len(records)} records")
            records = lines
        if not records:
            return
        with self._cond:
            source = self._source(metric)
            if self._closing:
                self._count_drop("after_close", len(records), source)
                return
            if self._url is None:               # local only: nothing to send to, nothing kept
                source.submitted += len(records)
                return
            spilled = source.add(records)
            if spilled:
                source.spilled_since_batch += spilled
                self._count_drop("buffer_full", spilled, source)
            if len(source.buffer) >= self.tuning["batch_records"]:
                self._cond.notify()

    def end_of(self, metric: str) -> None:
        """The metric has ended: its last records need not wait for the flush interval."""
        with self._cond:
            source = self._sources.get(metric)
            if source is not None and source.buffer:
                source.ended = True
                self._cond.notify()

    def set_server(self, url: str | None, token: str | None) -> None:
        """Point at another collector (or none); pending batches go to the new one."""
        with self._cond:
            self._url, self._token = base_url(url), token
            self._reachable, self._gzip_ok, self._failures, self._retry_at = None, False, 0, 0.0
            self._last_error = ""
            self._last_probe = -float("inf")     # the new collector is probed now, not a probe interval on
        self._wake_sender.set()

    def status(self) -> dict:
        """A snapshot for the GUI and the headless progress line; reads memory only."""
        with self._cond:
            sources = {}
            for name in set(self._sources) | set(self._pending):
                s = self._sources.get(name) or _Source(0)
                pending_batches, pending_records = self._pending.get(name, (0, 0))
                sources[name] = {"submitted": s.submitted, "buffered": len(s.buffer),
                                 "created_batches": s.created_batches, "sent_batches": s.sent_batches,
                                 "sent_records": s.sent_records, "pending_batches": pending_batches,
                                 "pending_records": pending_records, "dropped": s.dropped}
            return {
                "url": self._url,
                "reachable": self._reachable,
                "buffered": sum(len(s.buffer) for s in self._sources.values()),
                "sent_batches": sum(s.sent_batches for s in self._sources.values()),
                "sent_records": sum(s.sent_records for s in self._sources.values()),
                "created_batches": sum(s.created_batches for s in self._sources.values()),
                "pending_outbox": sum(b for b, _ in self._pending.values()),
                "pending_records": sum(r for _, r in self._pending.values()),
                "dropped": sum(self._drops.values()),
                "dropped_batches": self._dropped_batches,
                "drop_reasons": dict(self._drops),
                "last_error": self._last_error,
                "gzip": self._gzip_ok,
                "run_id": self.run_id,
                "host": self.host,
                "outbox_path": self.outbox_path,
                "sources": sources,
            }

    def close(self, timeout: float = 10.0) -> None:
        """Cut a last batch of everything buffered, try to send what is pending until the first
        failure or the timeout; what is not sent stays in the outbox for the next run."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._close_deadline = deadline
            self._retry_at = 0.0        # one more try now, whatever the backoff said; stop at a failure
            self._cond.notify()
        self._wake_sender.set()
        self._builder.join(max(0.0, deadline - time.monotonic()))
        self._sender.join(max(0.0, deadline - time.monotonic()) + 1.0)
        if not self._sender.is_alive() and not self._builder.is_alive():
            self._outbox.close()

    # --- builder thread: buffer -> batches in the outbox ------------------------------------------------
    def _build_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closing and not self._batch_due():
                    self._cond.wait(max(0.01, self._next_flush - time.monotonic()))
                closing = self._closing
                everything = closing or time.monotonic() >= self._next_flush
                if everything:
                    self._next_flush = time.monotonic() + self.tuning["flush_interval"]
                cuts = self._take(everything)
            try:
                for name, records, dropped in cuts:
                    self._store(name, records, dropped)
                if cuts or everything:      # also on quiet ticks, so old batches expire in an outage
                    self._enforce_bounds()
            except Exception as exc:  # noqa: BLE001 - the builder must keep running; the loss is counted
                log.exception("transport builder")
                with self._cond:
                    self._last_error = f"builder: {type(exc).__name__}: {_first_line(exc)}"
            if cuts:
                self._wake_sender.set()
            if closing:
                self._builder_done.set()
                self._wake_sender.set()
                return

    def _batch_due(self) -> bool:
        full = any(len(s.buffer) >= self.tuning["batch_records"] or s.ended for s in self._sources.values())
        return full or time.monotonic() >= self._next_flush

    def _take(self, everything: bool) -> list[tuple[str, list[dict | bytes], int]]:
        """Under the lock: pop whole batches (all of each buffer when `everything`, or when its metric
        ended)."""
        size = self.tuning["batch_records"]
        cuts = []
        for name, source in self._sources.items():
            whole, source.ended = everything or source.ended, False
            while len(source.buffer) >= size or (whole and source.buffer):
                n = min(size, len(source.buffer))
                cuts.append((name, [source.buffer.popleft() for _ in range(n)], source.spilled_since_batch))
                source.spilled_since_batch = 0
            if whole and source.spilled_since_batch and not source.buffer:
                # spilled records still reach the collector as a count, in an otherwise empty batch
                cuts.append((name, [], source.spilled_since_batch))
                source.spilled_since_batch = 0
        return cuts

    def _store(self, name: str, records: list[dict | bytes], dropped: int) -> None:
        """Serialize outside the lock, split by bytes, write each batch to the outbox."""
        text = _joined(records)
        if bytes in set(map(type, records)) and may_be_nonfinite(text):   # records are made strict by _encode
            records = _strict(records)
            text = _joined(records)
        for n, (part, count) in enumerate(_encode_parts(records, int(self.tuning["batch_bytes"]), text)):
            def build(batch_id: str, sequence: int, part: bytes = part, n: int = n,
                      count: int = count) -> tuple[bytes, int]:
                head = batch_head(metric=name, batch_id=batch_id, sequence=sequence, host=self.host,
                                  run_id=self.run_id, dropped=dropped if n == 0 else 0)
                return gzip.compress(batch_json(head, part), compresslevel=1), count
            try:
                self._outbox.add(self.run_id, name, build)
            except sqlite3.Error as exc:
                with self._cond:
                    self._count_drop("outbox_error", count, self._source(name), f"outbox: {exc}")
                continue
            with self._cond:
                self._source(name).created_batches += 1

    def _enforce_bounds(self) -> None:
        try:
            evicted = self._outbox.enforce_bounds()
        except sqlite3.Error as exc:
            with self._cond:
                self._last_error = f"outbox: {exc}"
            return
        with self._cond:
            for e in evicted:
                self._dropped_batches += e.batches
                self._count_drop(e.reason, e.records, self._source(e.source),
                                 f"outbox bound: dropped {e.batches} batches of {e.source} ({e.reason})")
        self._refresh_pending()

    # --- sender thread: outbox -> collector -----------------------------------------------------------
    def _send_loop(self) -> None:
        session = requests.Session()
        while True:
            try:
                if self._send_once(session):
                    return
            except Exception as exc:  # noqa: BLE001 - the sender must outlive any one bad batch
                log.exception("transport sender")
                with self._cond:
                    self._last_error = f"sender: {type(exc).__name__}: {_first_line(exc)}"
                self._sleep(1.0)

    def _send_once(self, session: requests.Session) -> bool:
        """One step: send the oldest batch, or wait for one; True when the sender is done."""
        with self._cond:
            url, token, closing = self._url, self._token, self._closing
        now = time.monotonic()
        if closing and now >= self._close_deadline:
            return True
        if url is None:
            if closing:
                return True
            self._sleep(1.0)
            return False
        if now < self._retry_at:
            if closing:
                return True         # the collector failed during the final flush: keep the rest
            self._sleep(self._retry_at - now)
            return False
        batch = self._outbox.oldest()
        if batch is None:
            if closing:
                if self._builder_done.is_set():
                    return True
                self._sleep(0.05)
            else:
                if now - self._last_probe >= self.tuning["probe_interval"]:
                    self._last_probe = now
                    self._probe(session, url)
                self._sleep(self.tuning["probe_interval"])
            return False
        self._deliver(session, url, token, batch)
        return False

    def _sleep(self, seconds: float) -> None:
        self._wake_sender.wait(max(0.0, seconds))
        self._wake_sender.clear()

    def _deliver(self, session: requests.Session, url: str, token: str | None, batch: Any) -> None:
        body, headers = batch.body, {"Content-Type": "application/json"}
        if self._gzip_ok and _gunzipped_size(body) >= self.tuning["gzip_min_bytes"]:
            headers["Content-Encoding"] = "gzip"
        else:
            body = gzip.decompress(body)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            reply = session.post(url + "/data", data=body, headers=headers,
                                 timeout=(self.tuning["connect_timeout"], self.tuning["timeout"]))
        except requests.RequestException as exc:
            self._failed(batch, unreachable(exc, url), reachable=False)
            return
        self._note_encoding(reply)
        code = reply.status_code
        if 200 <= code < 300 and not _acknowledges(reply, batch.batch_id):
            # a wrong URL, a proxy or a captive portal: a 2xx from anything but the collector says
            # nothing about the batch, which stays in the outbox
            self._failed(batch, f"HTTP {code} from {url}/data is not the collector's acknowledgement of the "
                         "batch (kept; check the URL)", reachable=False, hold=True)
        elif 200 <= code < 300:
            delivered = self._outbox.delete(batch.id)
            with self._cond:
                self._reachable, self._failures, self._retry_at = True, 0, 0.0
                self._last_error = ""          # delivery works again: the last failure is over
                if delivered:       # else the outbox bound evicted it meanwhile (counted there)
                    source = self._source(batch.source)
                    source.sent_batches += 1
                    source.sent_records += batch.records
            self._refresh_pending()
        elif code in HOLD_STATUSES:
            self._failed(batch, f"collector refused the batch: HTTP {code} {_reason(reply)} (kept; check "
                         "the URL and token)", reachable=True, hold=True)
        elif code in RETRY_STATUSES or code >= 500:
            self._failed(batch, f"HTTP {code} {_reason(reply)}", reachable=True,
                         retry_after=_retry_after(reply))
        else:
            self._outbox.delete(batch.id)
            with self._cond:
                self._reachable = True
                self._dropped_batches += 1
                self._count_drop(f"rejected_{code}", batch.records, self._source(batch.source),
                                 f"collector rejected batch {batch.sequence} of {batch.source}: HTTP {code} "
                                 f"{_reason(reply)}")
            self._refresh_pending()

    def _failed(self, batch: Any, error: str, reachable: bool, hold: bool = False,
                retry_after: float | None = None) -> None:
        try:
            self._outbox.failed_attempt(batch.id)
        except sqlite3.Error:
            pass
        cap = self.tuning["backoff_max"]
        with self._cond:
            self._failures += 1
            delay = cap if hold else min(cap, self.tuning["backoff_base"] * 2 ** (self._failures - 1))
            delay *= random.uniform(0.5, 1.0)    # jitter: many clients do not retry in step
            if retry_after is not None:
                delay = min(cap, max(delay, retry_after))
            self._retry_at = time.monotonic() + delay
            self._reachable = reachable
            self._last_error = error
        log.info("transport: %s; retry in %.1fs", error, delay)

    def _probe(self, session: requests.Session, url: str) -> None:
        """Is the collector there? Any HTTP answer means yes."""
        try:
            reply = session.get(url + "/healthz", timeout=(self.tuning["connect_timeout"], self.tuning["timeout"]))
        except requests.RequestException as exc:
            with self._cond:
                self._reachable, self._last_error = False, unreachable(exc, url)
            return
        self._note_encoding(reply)
        with self._cond:
            self._reachable = True
            if self._last_error.startswith("collector unreachable"):
                self._last_error = ""          # it answers again (no batch was waiting to prove it)

    def _note_encoding(self, reply: requests.Response) -> None:
        # RFC 7694: a server lists the request content codings it accepts in Accept-Encoding.
        if "gzip" in reply.headers.get("Accept-Encoding", "").lower():
            self._gzip_ok = True

    # --- shared bookkeeping (callers hold self._cond where noted) ------------------------------------
    def _source(self, name: str) -> _Source:
        source = self._sources.get(name)
        if source is None:
            source = self._sources[name] = _Source(int(self.tuning["max_buffered"]))
        return source

    def _count_drop(self, reason: str, records: int, source: _Source, error: str | None = None) -> None:
        self._drops[reason] = self._drops.get(reason, 0) + records
        source.dropped += records
        if error:
            self._last_error = error
            log.warning("transport: %s", error)

    def _refresh_pending(self) -> None:
        try:
            pending = self._outbox.pending()
        except sqlite3.Error:
            return
        with self._cond:
            self._pending = pending


def _encode(value: Any) -> bytes:
    """Strict JSON: a NaN or infinity (json.loads lets a script print one) becomes null; a strict
    collector would otherwise reject the NaN token and with it the whole batch."""
    try:
        return json.dumps(value, separators=(",", ":"), default=str, allow_nan=False).encode()
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"), default=str).encode()


def _encode_parts(records: list[dict | bytes], limit: int, text: bytes | None = None) -> list[tuple[bytes, int]]:
    """The records as comma-joined JSON parts of at most `limit` bytes each (a single larger record is
    a part of its own), with each part's record count; one part, possibly empty, when they all fit.
    text: _joined(records), when the caller has it."""
    text = _joined(records) if text is None else text
    if len(text) <= limit or len(records) <= 1:
        return [(text, len(records))]
    half = len(records) // 2
    return _encode_parts(records[:half], limit) + _encode_parts(records[half:], limit)


def _joined(records: list[dict | bytes]) -> bytes:
    """The records' JSON texts joined by commas: a line as it is; records in runs of up to ENCODE_RUN a
    json.dumps call (a third of the time of a call each; one call holds the GIL throughout, and a
    2,000-record cut took ~9 ms, a wait for the window's thread; a run of 250 about 1 ms)."""
    parts, run = [], []
    for record in records:
        if type(record) is bytes:
            if run:
                parts.append(_encode(run)[1:-1])
                run = []
            parts.append(record)
        else:
            run.append(record)
            if len(run) == ENCODE_RUN:
                parts.append(_encode(run)[1:-1])
                run = []
    if run:
        parts.append(_encode(run)[1:-1])
    return b",".join(parts)


def _strict(records: list[dict | bytes]) -> list[dict | bytes]:
    """The records with each line that json.loads reads with a NaN or an infinity in it (a script may
    print one) encoded again, as _encode does a record: the collector refuses the word. The rest as they
    are."""
    return [_reencoded(r) if type(r) is bytes and may_be_nonfinite(r) else r for r in records]


def _reencoded(line: bytes) -> bytes:
    try:
        return _encode(json.loads(line))
    except ValueError:      # not JSON: sent as it is, the collector's 400 counts the batch as dropped
        return line


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def base_url(url: str | None) -> str | None:
    """The collector's base URL; '.../data' is accepted too."""
    if not url:
        return None
    url = url.strip().rstrip("/")
    return url[: -len("/data")] if url.endswith("/data") else url


def _gunzipped_size(body: bytes) -> int:
    return struct.unpack("<I", body[-4:])[0] if len(body) >= 4 else 0   # gzip's ISIZE trailer


def _reason(reply: requests.Response) -> str:
    try:
        data = reply.json()
        if isinstance(data, dict):
            return str(data.get("reason") or data.get("error") or data.get("message") or "")[:200]
    except ValueError:
        pass
    return reply.reason or ""


def _acknowledges(reply: requests.Response, batch_id: str) -> bool:
    """Is this the collector's own answer for the batch: JSON with status ok and the batch's id?"""
    try:
        data = reply.json()
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("status") == "ok" and data.get("batch_id") == batch_id


def _retry_after(reply: requests.Response) -> float | None:
    try:
        return float(reply.headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def collector_url(text: str) -> str:
    """A collector URL as typed, fixed where it lacks a scheme ('127.0.0.1:5055' -> 'http://...');
    ValueError with a one-line reason for a scheme other than http(s) or no host."""
    text = text.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"collector URL must start with http:// or https://, not {parts.scheme}://")
    if not parts.hostname:
        raise ValueError("collector URL has no host")
    return text


def unreachable(exc: requests.RequestException, url: str) -> str:
    """One line for a person: 'collector unreachable: connection refused (127.0.0.1:5055)'."""
    where = urllib.parse.urlsplit(url).netloc or url
    chain, cause = [], exc
    while cause is not None and len(chain) < 8:      # requests wraps urllib3 wraps the socket's error
        chain.append(cause)
        inner = getattr(cause, "reason", None)          # urllib3's MaxRetryError holds it there
        first = cause.args[0] if cause.args and isinstance(cause.args[0], BaseException) else None
        cause = cause.__cause__ or cause.__context__ or (inner if isinstance(inner, BaseException) else first)
    text = " ".join(str(c) for c in chain).lower()
    if isinstance(exc, (requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema,
                        requests.exceptions.InvalidURL)):
        why = "not an http(s) URL"
    elif any(isinstance(c, ConnectionRefusedError) for c in chain) or "connection refused" in text:
        why = "connection refused"
    elif isinstance(exc, requests.exceptions.SSLError):
        why = "TLS handshake failed"
    elif isinstance(exc, requests.exceptions.Timeout) or "timed out" in text:
        why = "timed out"
    elif any(isinstance(c, socket.gaierror) for c in chain) or "name or service not known" in text \
            or "failed to resolve" in text:
        why = "host not found"
    elif "reset by peer" in text or "remote end closed" in text or "aborted" in text:
        why = "connection reset"
    else:
        why = _first_line(exc)[:120] or type(exc).__name__
    return f"collector unreachable: {why} ({where})"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""
