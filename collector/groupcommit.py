"""Group commit: batches that arrive while a transaction is being written wait for it, then share the
next transaction, so concurrent requests cost one commit (and, on SQLite, one turn at the file's write
lock) instead of one each. No thread of its own: one waiting request at a time (the leader) writes
for all that queued, then wakes them; once its own item is written it hands the lead to the oldest
request still queued. Every request returns only once the transaction holding its item committed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Job:
    __slots__ = ("item", "finished", "result", "error", "wake")

    def __init__(self, item: Any) -> None:
        self.item = item
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.wake = threading.Event()  # set when finished, or when handed the lead


class GroupCommit(Generic[Item, Result]):
    def __init__(self, write: Callable[[list[Item]], list[Result]], max_items: int,
                 weight: Callable[[Item], int], max_weight: int) -> None:
        """write stores a group in one transaction and returns a result per item, in order. A group
        holds at most max_items items and, past its first item, at most max_weight in total."""
        self._write = write
        self._max_items, self._weight, self._max_weight = max_items, weight, max_weight
        self._queue: deque[_Job] = deque()
        self._lock = threading.Lock()  # guards the queue and _leading
        self._leading = False  # a request is writing, or has been handed the lead

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No group is written meanwhile (the lead is taken, as a request would take it)."""
        while True:
            with self._lock:
                if not self._leading:
                    self._leading = True
                    break
            time.sleep(0.01)
        try:
            yield
        finally:
            with self._lock:
                successor = self._queue[0] if self._queue else None
                if successor is None:
                    self._leading = False
                else:
                    successor.wake.set()

    def submit(self, item: Item) -> Result:
        """Store item with whatever else is queued; its result, or the write's exception."""
        job = _Job(item)
        with self._lock:
            self._queue.append(job)
            lead = not self._leading
            self._leading = True
        if not lead:
            job.wake.wait()
        if not job.finished:
            self._lead(job)
        if job.error is not None:
            raise job.error
        return job.result

    def _lead(self, job: _Job) -> None:
        """Write groups from the queue until job is written; then hand the lead on, or give it up."""
        while True:
            try:
                self._write_group(self._take())
            finally:
                with self._lock:
                    successor = self._queue[0] if self._queue else None
                    if successor is None:
                        self._leading = False
                    elif job.finished:
                        successor.wake.set()  # it writes the next group; we answer our request
            if successor is None or job.finished:
                return

    def _take(self) -> list[_Job]:
        with self._lock:
            group = [self._queue.popleft()]
            weight = self._weight(group[0].item)
            while self._queue and len(group) < self._max_items:
                weight += self._weight(self._queue[0].item)
                if weight > self._max_weight:
                    break
                group.append(self._queue.popleft())
        return group

    def _write_group(self, group: list[_Job]) -> None:
        try:
            results = self._write([job.item for job in group])
        except Exception as e:  # noqa: BLE001 - it is handed to the requests the group was written for
            if len(group) > 1:
                # the transaction stored nothing: write each alone, so one batch cannot fail the others
                for job in group:
                    self._write_group([job])
                return
            group[0].error = e
        except BaseException as e:  # interrupted: no result for anyone
            for job in group:
                job.error = e
            self._finish(group)
            raise
        else:
            for job, result in zip(group, results, strict=True):
                job.result = result
        self._finish(group)

    @staticmethod
    def _finish(group: list[_Job]) -> None:
        for job in group:
            job.finished = True
            job.wake.set()
