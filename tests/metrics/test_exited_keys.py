"""A process that exits between an interval's read and the check for its exit keeps what it did then:
its keys are forgotten a read later (bcctool.ExitedKeys), not at the read that first found it gone."""

import ctypes

import pytest

import bcctool

GONE = 4_194_304 + 17   # above any pid_max: /proc/GONE never exists


class Counts(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64)]


class FakePerCpuHash:
    """The calls CounterDeltas makes of a BPF_PERCPU_HASH keyed by a u32, two CPUs."""

    Key = ctypes.c_uint32

    def __init__(self) -> None:
        self.data: dict[int, list[int]] = {}
        self.after_next_read: list[tuple[int, int, int]] = []   # events that land just after a read

    def add(self, key: int, cpu: int, n: int) -> None:
        self.data.setdefault(key, [0, 0])[cpu] += n

    def read_all(self):
        """What bcctool.all_items() reads from a map with one batch read."""
        items = [(key, (Counts * 2)(*(Counts(v) for v in per_cpu))) for key, per_cpu in self.data.items()]
        for event in self.after_next_read:
            self.add(*event)
        self.after_next_read = []
        return items

    def __delitem__(self, key) -> None:
        del self.data[getattr(key, "value", key)]


@pytest.fixture(autouse=True)
def fake_reads(monkeypatch):
    monkeypatch.setattr(bcctool.maps, "all_items", lambda table: table.read_all())


def test_events_between_the_read_and_the_exit_are_kept():
    table = FakePerCpuHash()
    deltas = bcctool.CounterDeltas(table, tgid_of=lambda tgid: tgid)
    table.add(GONE, 0, 5)
    assert deltas.step() == {GONE: {"count": 5}}
    # nothing new at this read, but 3 more events land just after it, then the process exits before the
    # check for gone keys that follows the read: the next read has them
    table.after_next_read = [(GONE, 1, 3)]
    assert deltas.step() == {}
    assert deltas.step() == {GONE: {"count": 3}}
    assert deltas.step() == {}
    assert deltas.step() == {}
    assert GONE not in table.data, "a settled exited key leaves the map"


def test_exited_keys_wait_one_read():
    exited = bcctool.ExitedKeys()
    assert exited.settled(["a", "b"]) == []
    assert exited.settled(["a"]) == ["a"]        # b changed meanwhile: not gone-and-unchanged twice
    assert exited.settled(["b"]) == []
    assert exited.settled(["b"]) == ["b"]
