"""A profiler's stacks named once each: they recur interval after interval (a busy loop's few paths),
so each distinct one is named once and its frames kept, not looked up frame by frame every interval
(about 2 us a frame, 25 frames a stack). A frame is a (name, module, kind) tuple, kind "kernel" or
"user"; one tuple is shared by every stack that holds it, and its JSON object is encoded once. Every
cache is bounded (emptied when full)."""

from __future__ import annotations

import functools
import itertools
import json
import struct
from typing import Any

from .symbols import UNKNOWN

MAX_NAMED = 8192
LEAF = struct.Struct("<Q")   # a kernel stack's first address: the interrupted pc


def _jit_named(frames: tuple) -> bool:
    """A frame named from a JIT's perf map, which may name its addresses differently later: not kept."""
    return any(f[1].startswith("perf-") for f in frames)


class Frames(tuple):
    """A stack's frames, root first, with its hash and its set of distinct frames worked out once: each
    interval keys several tables by every stack (its count, the process names, the top functions, its
    JSON), and a plain tuple's hash walks all its frames each time (~2 us for 30)."""

    def __new__(cls, frames: Any) -> Frames:
        self = super().__new__(cls, frames)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def distinct(self) -> frozenset:
        return frozenset(self)


class StackNames:
    """Frames of kernel and user stacks, named by a Symbolizer (bcctool.symbols) and kept."""

    def __init__(self, sym: Any) -> None:
        self.sym = sym
        self.kernel_named: dict[bytes, tuple] = {}   # a kernel stack's callers' addresses -> frames, root first
        self.user_named: dict[tuple, tuple] = {}     # (maps snapshot, its time, addresses) -> frames, innermost first
        self.frame_tuples: dict[tuple, tuple] = {}   # (name, module, kind) -> the one tuple of it
        self.encoded: dict[tuple, str] = {}          # frame -> its JSON object: every stack record repeats it
        self.stacks_encoded: dict[tuple, str] = {}   # frames -> '"frames":[...]', a record's field
        self.kernel_at: dict[int, tuple] = {}        # kernel address -> its frame: new stacks reuse known addresses
        self.whole: dict[tuple, Frames] = {}         # (maps snapshot, kernel shape, user addresses) -> whole stack
        # a kernel stack (its addresses) -> its shape's number; (callers' addresses, leaf frame) -> the
        # number: a small int keys `whole` (hashed every sample), numbers never reused (a count)
        self.kernel_shapes: dict[bytes, int] = {}
        self.shape_numbers: dict[tuple, int] = {}
        self.next_shape = itertools.count(1)

    def stack_key(self, tgid: int, kernel: Any, user: Any) -> tuple:
        """What names a sample's whole stack: its kernel stack (its callers' addresses and its leaf's
        function: the interrupted pc is anywhere in a function, so most sampled kernel stacks are new by
        address), its user stack (addresses, or the walk's error) and, for user addresses, the process's
        maps snapshot (a dlopen names them again)."""
        if isinstance(kernel, bytes) and kernel:
            kernel = self._kernel_shape(kernel)
        if not isinstance(user, (bytes, tuple)):
            return (None, None, kernel, user)
        snap = self.sym.maps(tgid)
        return (id(snap), snap.taken, kernel, user) if snap is not None else (tgid, None, kernel, user)

    def _kernel_shape(self, kernel: bytes) -> int:
        """The number of a kernel stack's callers and leaf function (see stack_key)."""
        number = self.kernel_shapes.get(kernel)
        if number is None:
            if len(self.kernel_shapes) >= 4 * MAX_NAMED:
                self.kernel_shapes.clear()
            if len(self.shape_numbers) >= 4 * MAX_NAMED:
                self.shape_numbers.clear()   # a shape met again gets a new number: never another's
            shape = self._callers_and_leaf(kernel)
            number = self.shape_numbers.get(shape)
            if number is None:
                number = self.shape_numbers[shape] = next(self.next_shape)
            self.kernel_shapes[kernel] = number
        return number

    def known(self, key: tuple) -> Frames | None:
        """The whole stack kept for stack_key()'s key: the same Frames interval after interval."""
        return self.whole.get(key)

    def keep(self, key: tuple | None, frames: list[tuple]) -> Frames:
        """frames as a Frames, kept for `key` (None: not kept) unless a JIT's perf map named a frame."""
        stack = Frames(frames)
        if key is not None and not _jit_named(stack):
            if len(self.whole) >= MAX_NAMED:
                self.whole.clear()
            self.whole[key] = stack
        return stack

    def kernel_frames(self, kernel: bytes) -> tuple:
        """A kernel stack (u64 addresses, innermost first, as the sample holds them), root first. Its
        callers are kept by address, its leaf by function (see stack_key)."""
        if not kernel:
            return ()
        callers, leaf = self._callers_and_leaf(kernel)
        frames = self.kernel_named.get(callers)
        if frames is None:
            if len(self.kernel_named) >= MAX_NAMED:
                self.kernel_named.clear()
            addrs = struct.unpack(f"<{len(callers) // 8}Q", callers)
            frames = self.kernel_named[callers] = tuple(self._kernel_frame(a) for a in reversed(addrs))
        return frames + (leaf,)

    def _callers_and_leaf(self, kernel: bytes) -> tuple[bytes, tuple]:
        """A kernel stack (not empty) as its callers' addresses and its leaf's frame (the interrupted pc's
        function)."""
        return kernel[8:], self._kernel_frame(LEAF.unpack_from(kernel)[0])

    def user_frames(self, tgid: int, addrs: tuple) -> list[tuple]:
        """Innermost first, every address after the first a return address (named by its call). Kept per
        maps snapshot (a new one, after a dlopen, names them again; a fork child named from its parent's
        shares the parent's), unless a frame came from a JIT's perf map, which may name its addresses
        differently later."""
        snap = self.sym.maps(tgid)
        key = (id(snap), snap.taken, addrs) if snap is not None else (tgid, None, addrs)
        frames = self.user_named.get(key)
        if frames is None:
            named = [(f.name, "" if f.module == UNKNOWN else f.module, "user")
                     for f in self.sym.user_stack(tgid, list(addrs))]
            frames = tuple(self._shared(f) for f in named)
            if not _jit_named(frames):
                if len(self.user_named) >= MAX_NAMED:
                    self.user_named.clear()
                self.user_named[key] = frames
        return list(frames)

    def frame_json(self, frame: tuple) -> str:
        """The frame as a stack record's JSON object: {"name", "module", "kind"}."""
        text = self.encoded.get(frame)
        if text is None:
            if len(self.encoded) >= 4 * MAX_NAMED:
                self.encoded.clear()
            text = self.encoded[frame] = json.dumps({"name": frame[0], "module": frame[1], "kind": frame[2]},
                                                    separators=(",", ":"))
        return text

    def stack_json(self, frames: tuple) -> str:
        """A stack record's `"frames":[...]` field, encoded once a stack: a stack recurs interval after
        interval."""
        text = self.stacks_encoded.get(frames)
        if text is None:
            if len(self.stacks_encoded) >= MAX_NAMED:
                self.stacks_encoded.clear()
            text = self.stacks_encoded[frames] = f'"frames":[{",".join(map(self.frame_json, frames))}]'
        return text

    def _shared(self, frame: tuple) -> tuple:
        if len(self.frame_tuples) >= 4 * MAX_NAMED:
            self.frame_tuples.clear()
        return self.frame_tuples.setdefault(frame, frame)

    def _kernel_frame(self, addr: int) -> tuple:
        frame = self.kernel_at.get(addr)
        if frame is None:
            if len(self.kernel_at) >= 4 * MAX_NAMED:
                self.kernel_at.clear()
            f = self.sym.kernel_frame(addr)
            module = f.module.strip("[]")
            frame = self.kernel_at[addr] = self._shared((f.name, "" if module == "kernel" else module, "kernel"))
        return frame
