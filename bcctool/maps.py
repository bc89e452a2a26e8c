"""Reading BPF maps the probes only add to: per-CPU sums, per-interval deltas, keys of processes that
have exited (forgotten a read late, so nothing they did is lost), and a process's name when it is gone."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .proctext import read_text
from .taskinfo import comm_text, processes


def _plain(obj: Any) -> Any:
    """A ctypes map key as a hashable value: the scalar, or the tuple of its non-padding fields."""
    if hasattr(obj, "_fields_"):
        return tuple(getattr(obj, name) for name, *_ in obj._fields_ if not name.startswith("pad"))
    return getattr(obj, "value", obj)


BATCH_ENTRIES = 256   # entries a batch read takes per syscall: most maps' live entries in one


def all_items(table: Any) -> list[tuple[Any, Any]]:
    """Every (key, leaf) of a BPF map, as BCC's items_lookup_batch() gives them (a scalar as an int, a
    struct or a per-CPU leaf as a ctypes object): in batches where the kernel has batch ops, else by
    walking it. BCC's batch read allocates buffers for all max_entries each call (MBs for a large hash,
    fresh pages to fault in every interval: ~600 page faults a second, most of an idle metric's CPU);
    these buffers hold BATCH_ENTRIES and are kept with the table."""
    items = _batch_reader(table).read()
    return items if items is not None else list(table.items())


def raw_items(table: Any) -> tuple[bytes, bytes]:
    """Every entry's key bytes and value bytes, each end to end, for parsing with struct rather than
    one ctypes object an entry: batch reads, or BCC's walk where the kernel has no batch ops."""
    got = RawEntries(table).read()
    if got is None:
        items = list(table.items())
        got = b"".join(bytes(k) for k, _ in items), b"".join(bytes(v) for _, v in items)
    return got


def raw_prefix(table: Any, count: int) -> bytes:
    """The value bytes of an array's first `count` indices, end to end (a per-CPU array's: every CPU's
    value, each 8-byte aligned, an index after another), in a few batch reads rather than a lookup each."""
    count = min(count, table.max_entries)
    if count <= 0:
        return b""
    batch, size, out = _batch_reader(table), ctypes.sizeof(table.Leaf), []
    try:
        for n in batch.chunks(limit=count):
            out.append(ctypes.string_at(batch.values, n * size))
    except _NoBatchOps:
        return b"".join(bytes(table[table.Key(i)]) for i in range(count))
    return b"".join(out)


def take_all_items(table: Any) -> list[tuple[Any, Any]]:
    """all_items(), each entry deleted as it is read (BPF_MAP_LOOKUP_AND_DELETE_BATCH): for a hash no
    program writes at the moment."""
    items = _batch_reader(table).read(delete=True)
    if items is None:
        items = list(table.items())
        delete_each(table, [k for k, _ in items])
    return items


def delete_each(table: Any, keys: list[Any]) -> None:
    """Delete the keys one by one, those gone already left alone."""
    for k in keys:
        try:
            del table[k]
        except KeyError:
            pass


def delete_keys(table: Any, keys: list[Any]) -> None:
    """Delete the keys in one BPF_MAP_DELETE_BATCH; one by one without batch ops, or for those left
    when one was gone already (the batch stops there)."""
    if not keys:
        return
    try:
        table.items_delete_batch((table.Key * len(keys))(*keys))
    except Exception:  # noqa: BLE001 - BCC raises bare Exception
        delete_each(table, keys)


def zero_indices(table: Any, indices: list[int]) -> None:
    """Set an array's (or a per-CPU array's, every CPU's) entries at `indices` to zeros in one
    BPF_MAP_UPDATE_BATCH; one by one without batch ops."""
    if not indices:
        return
    try:
        table.items_update_batch((table.Key * len(indices))(*indices), (table.Leaf * len(indices))())
    except Exception:  # noqa: BLE001 - BCC raises bare Exception
        for i in indices:
            table[table.Key(i)] = table.Leaf()


def _batch_reader(table: Any) -> _BatchReader:
    batch = getattr(table, "_bcctool_batch", None)
    if batch is None:
        batch = table._bcctool_batch = _BatchReader(table)
    return batch


class _NoBatchOps(Exception):
    """The kernel has no batch operations for this map."""


class _BatchReader:
    """BPF_MAP_LOOKUP(_AND_DELETE)_BATCH through buffers of a few hundred entries, allocated once."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._size(min(table.max_entries, BATCH_ENTRIES))

    def _size(self, entries: int) -> None:
        self.entries = entries
        self.keys = (self.table.Key * entries)()
        self.values = (self.table.Leaf * entries)()

    def chunks(self, delete: bool = False, limit: int | None = None) -> Iterator[int]:
        """Fill the buffers batch after batch (deleting what is read with `delete`; the first `limit`
        of an array's), yielding how many entries each batch holds; _NoBatchOps where the kernel has
        no batch ops for this map."""
        from bcc.libbcc import lib  # noqa: PLC0415 - only after load(), which needs bcc anyway

        batch_op = lib.bpf_lookup_and_delete_batch if delete else lib.bpf_lookup_batch
        # the kernel's resume token: a bucket (hash) or a key (array), at most 8 bytes for either here
        token_size = max(8, ctypes.sizeof(self.table.Key))
        buffers = ctypes.create_string_buffer(token_size), ctypes.create_string_buffer(token_size)
        token_in, token_out = (ctypes.cast(b, ctypes.POINTER(ctypes.c_uint32)) for b in buffers)
        count, first, total = ctypes.c_uint32(0), True, 0
        while limit is None or total < limit:
            count.value = self.entries if limit is None else min(self.entries, limit - total)
            res = batch_op(self.table.map_fd, None if first else token_in, token_out, self.keys, self.values,
                           ctypes.byref(count))
            err = ctypes.get_errno()
            if res != 0 and err == errno.ENOSPC and count.value == 0:
                self._size(self.entries * 2)   # one bucket holds more than the buffers: larger, same place
                continue
            n = count.value
            if n:
                total += n
                yield n
            if res != 0:
                if err == errno.ENOENT:
                    return   # the whole map read
                if first and err in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise _NoBatchOps
                raise OSError(err, f"BPF map batch read: {os.strerror(err)}")
            if n == 0:
                return   # no progress: nothing left
            ctypes.memmove(buffers[0], buffers[1], token_size)
            first = False

    def read(self, delete: bool = False, limit: int | None = None) -> list[tuple[Any, Any]] | None:
        """Every entry as BCC's generator yields it (see chunks()); None without batch ops."""
        key_type, leaf_type, out = self.table.Key, self.table.Leaf, []
        try:
            for n in self.chunks(delete, limit):
                # one copy of the entries read; its elements are what BCC's generator yields
                out.extend(zip((key_type * n).from_buffer_copy(self.keys),
                               (leaf_type * n).from_buffer_copy(self.values), strict=True))
        except _NoBatchOps:
            return None
        return out


def percpu_totals(table: Any) -> dict[Any, tuple[Any, dict[str, int]]]:
    """{plain key: (ctypes key, {field: value summed over CPUs})} for a BPF_PERCPU_HASH of counters."""
    out = {}
    for key, per_cpu in all_items(table):
        names = [name for name, *_ in per_cpu[0]._fields_ if not name.startswith("pad")]
        out[_plain(key)] = (key, {n: sum(getattr(v, n) for v in per_cpu) for n in names})
    return out


def percpu_array_sums(table: Any) -> dict[int, int]:
    """{index: value summed over CPUs} of a BPF_PERCPU_ARRAY of u64 counters, zeros left out."""
    out = {}
    for key, per_cpu in table.items():
        total = sum(per_cpu)
        if total:
            out[key.value] = total
    return out


class HistDeltas:
    """Per-interval counts of a per-CPU log2 histogram (BPF_PERCPU_ARRAY of slots) the probes only add to."""

    def __init__(self, table: Any) -> None:
        self.table, self.seen = table, {}

    def step(self) -> dict[int, int]:
        now = percpu_array_sums(self.table)
        delta = {slot: n - self.seen.get(slot, 0) for slot, n in now.items() if n != self.seen.get(slot, 0)}
        self.seen = now
        return delta


def value_of(table: Any, key: int) -> int:
    """The scalar a map holds under an integer key (a fork child's parent), 0 where it holds none."""
    try:
        return table[table.Key(key)].value
    except KeyError:
        return 0


def insert_new(table: Any, key: Any, leaf: Any) -> bool:
    """Add key -> leaf unless the key is there already (BPF_NOEXIST): seeding from /proc must not
    overwrite what a probe has stored since it attached. False when the key existed or the map is full."""
    from bcc.libbcc import lib  # noqa: PLC0415 - only after load(), which needs bcc anyway

    return lib.bpf_update_elem(table.map_fd, ctypes.byref(key), ctypes.byref(leaf), 1) == 0


class ExitedKeys:
    """Keys of processes that are gone, forgotten one read after the read that first found them gone and
    unchanged: a process can add events between a read and its exit, and only a read that begins after
    its exit is sure to hold them all."""

    def __init__(self) -> None:
        self.gone_last_step: set[Any] = set()

    def settled(self, gone: list[Any]) -> list[Any]:
        """Of the keys gone and unchanged at this read, those that were so at the last one too."""
        ready = [k for k in gone if k in self.gone_last_step]
        self.gone_last_step = set(gone) - set(ready)
        return ready


class CounterDeltas:
    """Per-interval deltas of a per-CPU hash the probes only add to (reading and clearing would lose
    what the probes add in between). Keys of processes that have exited and added nothing new are
    deleted from the map (and from `comms`, a tgid-keyed map, if given) and forgotten; with
    tgid_of=None the keys are not processes (devices, buckets) and are kept."""

    def __init__(self, table: Any, comms: Any = None,
                 tgid_of: Callable[[Any], int] | None = lambda k: k[0]) -> None:
        self.table, self.comms, self.tgid_of = table, comms, tgid_of
        # a key's bytes (an int key as itself) -> (plain key, ctypes key, its per-CPU values' bytes, their sums)
        self.seen: dict[Any, tuple[Any, Any, bytes, dict[str, int]]] = {}
        self.exited = ExitedKeys()
        self.fields: list[str] | None = None

    def step(self) -> dict[Any, dict[str, int]]:
        """{plain key: {field: increase since the last step}} for the keys that changed. A key whose
        values' bytes are those of the last step is passed over unsummed: under a fork-heavy load most
        keys are processes gone, waiting to be forgotten."""
        deltas = {}
        for key, per_cpu in all_items(self.table):
            ident = key if isinstance(key, int) else bytes(key)
            raw = bytes(per_cpu)
            known = self.seen.get(ident)
            if known is not None and known[2] == raw:
                continue
            if self.fields is None:
                self.fields = [name for name, *_ in per_cpu[0]._fields_ if not name.startswith("pad")]
            values = {n: sum(getattr(v, n) for v in per_cpu) for n in self.fields}
            plain, old = (known[0], known[3]) if known is not None else (_plain(key), {})
            self.seen[ident] = (plain, key, raw, values)
            delta = {n: v - old.get(n, 0) for n, v in values.items()}
            if any(delta.values()):
                deltas[plain] = delta
        self._forget_exited(deltas)
        return deltas

    def _forget_exited(self, changed: dict) -> None:
        if self.tgid_of is None:
            return
        quiet = [(ident, entry) for ident, entry in self.seen.items() if entry[0] not in changed]
        alive = processes() if quiet else set()   # one read of /proc, not a stat a key
        gone = {entry[0]: ident for ident, entry in quiet if self.tgid_of(entry[0]) not in alive}
        settled = self.exited.settled(list(gone))
        if not settled:
            return
        keys = []
        for plain in settled:
            _, key, _, _ = self.seen.pop(gone[plain])
            keys.append(self.table.Key(key) if isinstance(key, int) else key)   # a batch gives a scalar key as an int
        delete_keys(self.table, keys)
        if self.comms is not None:
            delete_keys(self.comms, [self.comms.Key(tgid) for tgid in {self.tgid_of(plain) for plain in settled}])


def process_name(tgid: int, comms: Any = None) -> str:
    """A process's command from /proc, else from a tgid-keyed BPF map of `comm`s, else '[gone]'."""
    comm = read_text(f"/proc/{tgid}/comm")
    if comm is not None:
        return comm.strip()
    leaf = comms.get(comms.Key(tgid)) if comms is not None else None
    return leaf.comm.decode(errors="replace") if leaf else "[gone]"


def process_names_of(tgids: Iterable[int], comms: Any = None) -> dict[int, str]:
    """{tgid: process_name()} of many processes, the map of `comm`s read once (in batches) for those
    gone rather than looked up for each (a fork-heavy load leaves hundreds an interval)."""
    out, gone, alive = {}, [], processes()
    for tgid in tgids:
        comm = read_text(f"/proc/{tgid}/comm") if tgid in alive else None
        if comm is None:
            gone.append(tgid)
        else:
            out[tgid] = comm.strip()
    if gone:
        kept: dict[int, bytes] = {}
        if comms is not None:   # a u32 key; a struct with a `comm` field (the metric's comm_t)
            keys, values = raw_items(comms)
            size, at, width = ctypes.sizeof(comms.Leaf), comms.Leaf.comm.offset, comms.Leaf.comm.size
            kept = {tgid: values[size * i + at:size * i + at + width]
                    for i, (tgid,) in enumerate(struct.iter_unpack("<I", keys))}
        for tgid in gone:
            comm = kept.get(tgid)
            out[tgid] = comm_text(comm) if comm is not None else "[gone]"
    return out


class RawEntries:
    """A BPF hash read whole each interval as raw bytes, for entries parsed with struct rather than made
    one ctypes object each (BCC's batch read yields a key and a leaf object per entry)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.key_size, self.value_size = ctypes.sizeof(table.Key), ctypes.sizeof(table.Leaf)

    def read(self) -> tuple[bytes, bytes] | None:
        """(keys, values): every entry's bytes end to end; None where the kernel has no batch ops."""
        batch, keys, values = _batch_reader(self.table), [], []
        try:
            for n in batch.chunks():
                keys.append(ctypes.string_at(batch.keys, n * self.key_size))
                values.append(ctypes.string_at(batch.values, n * self.value_size))
        except _NoBatchOps:
            return None
        return b"".join(keys), b"".join(values)

    def delete(self, keys: bytes) -> None:
        """Delete the entries whose keys' bytes are `keys`, end to end (BPF_MAP_DELETE_BATCH)."""
        from bcc.libbcc import lib  # noqa: PLC0415

        n = len(keys) // self.key_size
        if not n:
            return
        count = ctypes.c_uint32(n)
        buf = ctypes.create_string_buffer(keys, len(keys))
        if lib.bpf_delete_batch(self.table.map_fd, ctypes.byref(buf), ctypes.byref(count)) != 0:
            for i in range(n):   # one gone meanwhile fails the batch: the rest one by one
                key = self.table.Key.from_buffer_copy(keys, i * self.key_size)
                try:
                    del self.table[key]
                except KeyError:
                    pass
