"""Profiles pushed on a schedule to fleet backends (push_targets.py), off the request threads: a
scheduler thread makes, every target's interval, one profile per stream of its metrics and hosts over
the window since its last one (ending delay_s before now, so the window's batches have arrived) and
queues it (at most max_window_s of it; the streams read one at a time, none once the queue is full);
a sender thread per target POSTs them. A failed try (no answer, 429, 5xx) is tried again
after a backoff that doubles (or the answer's Retry-After), up to the target's retries; another 4xx is
not tried again. A full queue drops the new profile. Everything is counted (PushStats, in
push_targets.py: the overview page and /metrics). Ingest never waits on any of it: /data only writes to the database, and the scheduler
reads from it in its own thread.

The counts are this process's own. Several collector processes with one push config would each push
every profile: give it to one of them."""

from __future__ import annotations

import email.utils
import logging
import math
import queue
import threading
import time
from collections.abc import Callable

import requests

from collector import otlp_export, pyroscope_push
from collector.profiles import RangeProfile, range_profile
from collector.push_targets import Push, PushStats, PushTarget
from collector.store import Store
from collector.stream import Stream

CLOCK_SLACK_S = 300.0  # a stream last seen this long before a window starts holds none of its records
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})  # OTLP/HTTP's retryable answers, and timeouts
MAX_ERROR = 200  # characters of the last error kept for the overview (and in PushStats)

log = logging.getLogger("collector.push")
Builder = Callable[[PushTarget, tuple[str, str, str], RangeProfile, float, float], Push]
BUILDERS: dict[str, Builder] = {"pyroscope": pyroscope_push.build, "otlp": otlp_export.build}


class _Target:
    def __init__(self, target: PushTarget, window_end: float) -> None:
        self.target = target
        self.queue: queue.Queue[Push] = queue.Queue(target.queue)
        self.stats = PushStats(target)
        self.window_end = window_end  # the last window's end: the next starts just after it
        self.due = time.monotonic() + target.interval_s


class Pusher:
    def __init__(self, store: Store, targets: tuple[PushTarget, ...], clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._lock = threading.Lock()  # the counts: the scheduler and the senders add to them
        self._stop = threading.Event()
        now = clock()
        self._targets = [_Target(t, now - t.delay_s) for t in targets]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._schedule, name="collector-push-schedule", daemon=True)]
        self._threads += [threading.Thread(target=self._send_all, args=(t,), name=f"collector-push-{t.target.name}",
                                           daemon=True) for t in self._targets]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads; profiles still queued are abandoned (counted)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        for t in self._targets:
            while True:
                try:
                    t.queue.get_nowait()
                except queue.Empty:
                    break
                self._count(t, abandoned=1)

    def stats(self) -> list[PushStats]:
        with self._lock:
            for t in self._targets:
                t.stats.queued = t.queue.qsize()
            return [PushStats(**vars(t.stats)) for t in self._targets]

    def _count(self, t: _Target, **added: int) -> None:
        with self._lock:
            for name, n in added.items():
                setattr(t.stats, name, getattr(t.stats, name) + n)

    # the schedule: a window per target per interval

    def _schedule(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for t in self._targets:
                if t.due <= now:
                    self.push_window(t)
                    t.due = max(t.due + t.target.interval_s, time.monotonic())
            self._stop.wait(max(0.0, min(t.due for t in self._targets) - time.monotonic()))

    def push_now(self) -> None:
        """Queue every target's window up to now (what the schedule does at each target's interval)."""
        for t in self._targets:
            self.push_window(t)

    def push_window(self, t: _Target) -> None:
        """Queue a profile per stream of the target's over (window_end, now - delay_s], at most
        max_window_s of it (after an outage, the older part is skipped: counted in seconds). The streams
        are read one at a time, and no more once the queue is full (the rest counted as dropped); a stream
        that cannot be read is counted and the others go on."""
        target = t.target
        since, until = t.window_end, self.clock() - target.delay_s
        if until <= since:
            return
        skipped = max(0.0, until - target.max_window_s - since)
        since += skipped
        try:
            wanted = self._streams(target, since)
        except Exception as e:  # a database that went away: this window is read again next tick
            self._read_error(t, "reading the window", e)
            return
        t.window_end = until
        self._count(t, windows=1)
        if skipped:
            with self._lock:
                t.stats.skipped_s += skipped
            log.warning("push %s: %.0f s of records before %.0f not pushed (a window is max_window_s at most)",
                        target.name, skipped, since)
        for n, s in enumerate(wanted):
            if t.queue.full():  # what would be built now could only be dropped
                self._count(t, dropped=len(wanted) - n)
                return
            try:
                push = self._profile(t, s, since, until)
            except Exception as e:  # noqa: BLE001 - one stream's profile: the others are pushed all the same
                self._read_error(t, f"reading {s.host}/{s.run_id}/{s.source}", e)
                continue
            if push is None:
                continue
            try:
                t.queue.put_nowait(push)
            except queue.Full:
                self._count(t, dropped=1)

    def _read_error(self, t: _Target, what: str, e: Exception) -> None:
        self._count(t, read_errors=1)
        with self._lock:
            t.stats.last_error = f"{what}: {type(e).__name__}: {e}"[:MAX_ERROR]
        log.warning("push %s: %s failed", t.target.name, what, exc_info=True)

    def _streams(self, target: PushTarget, since: float) -> list[Stream]:
        """The target's streams that may hold records after since."""
        return [s for s in self.store.streams()
                if not (target.sources and s.source not in target.sources)
                and not (target.hosts and s.host not in target.hosts) and s.last_seen >= since - CLOCK_SLACK_S]

    def _profile(self, t: _Target, s: Stream, since: float, until: float) -> Push | None:
        """The stream's profile over (since, until] (None: no stack record there); a truncated one (its
        newest MAX_RECORDS records only) is counted."""
        target = t.target
        first = math.nextafter(since, math.inf)  # the records at `since` went with the last window
        result = range_profile(self.store, s.host, s.run_id, s.source, since=first, until=until)
        if not (result.records and result.profile.total > 0):
            return None
        if result.truncated:
            self._count(t, truncated=1)
        return BUILDERS[target.kind](target, (s.host, s.run_id, s.source), result, since, until)

    # the senders: one thread per target, tries with backoff

    def _send_all(self, t: _Target) -> None:
        session = requests.Session()
        try:
            while not self._stop.is_set():
                try:
                    push = t.queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    self._deliver(t, session, push)
                except Exception:  # noqa: BLE001 - the next profiles still go: this thread must not end
                    self._count(t, abandoned=1)
                    log.warning("push %s: could not deliver %s/%s/%s", t.target.name, *push.stream, exc_info=True)
        finally:
            session.close()

    def _deliver(self, t: _Target, session: requests.Session, push: Push) -> None:
        target = t.target
        for attempt in range(target.retries + 1):
            if attempt:
                self._count(t, retries=1)
            wait, error = self._try(session, target, push)
            if error is None:
                with self._lock:
                    t.stats.sent += 1
                    t.stats.last_success = self.clock()
                return
            with self._lock:
                t.stats.failures += 1
                t.stats.last_error = error[:MAX_ERROR]
            if wait is None or attempt == target.retries:
                break
            # the answer's Retry-After when longer than the backoff (docs/collector.md): not cut to backoff_max_s
            if self._stop.wait(max(wait, min(target.backoff_max_s, target.backoff_s * 2 ** attempt))):
                break
        self._count(t, abandoned=1)
        log.warning("push %s: gave up on %s/%s/%s: %s", target.name, *push.stream, t.stats.last_error)

    @staticmethod
    def _try(session: requests.Session, target: PushTarget, push: Push) -> tuple[float | None, str | None]:
        """(seconds the answer asks to wait, or None: do not try again; the error, None on success)."""
        try:
            answer = session.post(push.url, params=push.params, headers=push.headers, data=push.body or None,
                                  files=push.files, timeout=target.timeout_s)
        except requests.RequestException as e:
            return 0.0, f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - a request that cannot be made (a header http.client cannot
            # encode): the same next time, so a failure not tried again, logged with its traceback
            log.warning("push %s: the request failed", target.name, exc_info=True)
            return None, f"{type(e).__name__}: {e}"
        if 200 <= answer.status_code < 300:
            return None, None
        error = f"HTTP {answer.status_code}: {answer.text[:120]}"
        if answer.status_code not in RETRY_STATUSES:
            return None, error
        return retry_after_s(answer.headers.get("Retry-After", ""), time.time()), error


def retry_after_s(value: str, now: float) -> float:
    """Seconds a Retry-After asks to wait (RFC 9110: a number of seconds, or an HTTP-date); 0 when it
    says nothing usable."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return 0.0
    return max(0.0, when.timestamp() - now) if when.tzinfo is not None else 0.0


def start(store: Store, targets: tuple[PushTarget, ...]) -> Pusher | None:
    if not targets:
        return None
    pusher = Pusher(store, targets)
    pusher.start()
    return pusher
