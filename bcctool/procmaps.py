"""A process's executable mappings, read from /proc/PID/maps once and kept after the process exits.

Stacks are symbolized and unwound after the sample, sometimes after the process has gone; so a caller
takes `ProcessMaps.snapshot(pid)` when it first sees a process (or at the sample) and looks addresses
up in that snapshot later. A mapping whose file was deleted ("(deleted)") stays readable through
/proc/PID/map_files/START-END: the snapshot opens it at once and keeps the descriptor (closed with the
snapshot), so the binary can still be read when the process has exited.
"""

from __future__ import annotations

import bisect
import os
import time
import weakref
from dataclasses import dataclass, field

DELETED = " (deleted)"


@dataclass(frozen=True)
class Mapping:
    """One executable mapping: [start, end) maps `path` from file offset `offset`."""

    start: int
    end: int
    offset: int
    dev: str  # "major:minor" as maps prints it
    inode: int
    path: str  # as the process sees it, " (deleted)" removed; "" or "[vdso]"-like for anonymous
    deleted: bool = False
    open_path: str = ""  # where this process can read the file now (map_files fd, /proc/PID/root/...)

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")

    @property
    def module(self) -> str:
        """A short name for frames: the file's base name, or the pseudo name ([vdso], [anon]); a byte
        of the name that is not UTF-8 shown as U+FFFD (as proctext.py reads a comm)."""
        if self.path.startswith("/"):
            return os.fsencode(os.path.basename(self.path)).decode(errors="replace")
        return self.path or "[anon]"

    def readable_paths(self) -> list[str]:
        """Where to open the file: the process's own view first, then the path as named."""
        if self.path == "[vdso]":
            return ["[vdso]"]  # elfimage reads it from our own memory: the kernel maps one image
        paths = [self.open_path] if self.open_path else []
        if self.is_file and not self.deleted and self.path not in paths:
            paths.append(self.path)
        return paths

    def file_offset(self, addr: int) -> int:
        return addr - self.start + self.offset


@dataclass
class ProcessMaps:
    """The executable mappings of one process at one moment, sorted by start address."""

    pid: int
    taken: float
    mappings: list[Mapping]
    stack: tuple[int, int] | None = None  # the main thread's [stack] mapping
    _starts: list[int] = field(default_factory=list, repr=False)
    _fds: list[int] = field(default_factory=list, repr=False)
    _finalizer: weakref.finalize | None = field(default=None, repr=False)
    _memos: dict[str, dict] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.mappings.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.mappings]

    @classmethod
    def snapshot(cls, pid: int) -> ProcessMaps | None:
        """Read /proc/PID/maps now; None when the process has gone or cannot be read."""
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                # a path's bytes as the file system's names (surrogateescape): one that is not UTF-8
                # still opens; strict decoding raised out of the metric's loop
                lines = os.fsdecode(f.read()).splitlines()
        except OSError:
            return None
        return cls.parse(pid, lines)

    @classmethod
    def parse(cls, pid: int, lines: list[str], root: str | None = None) -> ProcessMaps:
        """Build a snapshot from maps lines (`root` defaults to /proc/PID/root, the process's view)."""
        root = f"/proc/{pid}/root" if root is None else root
        mappings: list[Mapping] = []
        fds: list[int] = []
        stack = None
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 5:
                continue
            try:
                lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
                offset, inode = int(parts[2], 16), int(parts[4])
            except ValueError:
                continue
            path = parts[5].strip() if len(parts) == 6 else ""
            if path == "[stack]":
                stack = (lo, hi)
            if "x" not in parts[1]:
                continue
            deleted = path.endswith(DELETED)
            if deleted:
                path = path[: -len(DELETED)]
            open_path = ""
            if inode and path.startswith("/"):
                open_path = root + path if root else path
                if deleted:
                    fd = _open_mapped_file(pid, lo, hi)
                    if fd is not None:
                        fds.append(fd)
                        open_path = f"/proc/self/fd/{fd}"
            mappings.append(Mapping(lo, hi, offset, parts[3], inode, path, deleted, open_path))
        snap = cls(pid, time.monotonic(), mappings, stack)
        snap._fds = fds
        snap._finalizer = weakref.finalize(snap, _close_all, fds)
        return snap

    def find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None

    def memo(self, name: str, limit: int = 1 << 12) -> dict:
        """A dict the stack libraries keep per snapshot (pc -> CFI row, pc -> frame): the same return
        addresses recur in every sample of a process, and a snapshot's addresses never change meaning.
        Emptied when it reaches `limit` entries (~200 bytes each; kept small: thousands of snapshots live)."""
        d = self._memos.get(name)
        if d is None or len(d) >= limit:
            d = self._memos[name] = {}
        return d

    def close(self) -> None:
        """Release the descriptors held for deleted files (also done when the snapshot is collected)."""
        if self._finalizer is not None:
            self._finalizer()


def _open_mapped_file(pid: int, lo: int, hi: int) -> int | None:
    try:
        return os.open(f"/proc/{pid}/map_files/{lo:x}-{hi:x}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
