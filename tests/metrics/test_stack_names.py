"""bcctool.stacknames: each distinct stack is named once and encoded once; a fork child named from its
parent's maps snapshot shares the parent's named stacks, and a new snapshot (after a dlopen) names
again."""

import json
from types import SimpleNamespace

from bcctool.stacknames import Frames, StackNames
from bcctool.symbols import Frame


class CountingSymbolizer:
    """maps() and user_stack() as bcctool.symbols.Symbolizer answers them, counting the namings."""

    def __init__(self) -> None:
        self.snapshots = {100: SimpleNamespace(taken=1.0)}
        self.snapshots[101] = self.snapshots[100]   # a fork child: inherit() shares the parent's snapshot
        self.namings = 0
        self.kernel_namings = 0

    def maps(self, pid: int):
        return self.snapshots.get(pid)

    def user_stack(self, pid: int, pcs: list[int]) -> list[Frame]:
        self.namings += 1
        return [Frame(f"f{pc:x}", "app") for pc in pcs]

    def kernel_frame(self, addr: int) -> Frame:
        """Kernel functions 256 bytes long: k10 holds 0x1000-0x10ff."""
        self.kernel_namings += 1
        return Frame(f"k{addr >> 8:x}", "[kernel]")


def test_a_fork_child_shares_its_parents_named_stacks_and_a_new_snapshot_names_again():
    sym = CountingSymbolizer()
    names = StackNames(sym)
    parent = names.user_frames(100, (0x10, 0x20))
    assert names.user_frames(101, (0x10, 0x20)) == parent and sym.namings == 1
    sym.snapshots[100] = SimpleNamespace(taken=2.0)   # the parent retaken (a dlopen): named again
    assert names.user_frames(100, (0x10, 0x20)) == parent and sym.namings == 2
    assert names.user_frames(102, (0x10, 0x20)) == parent and sym.namings == 3   # no snapshot: by pid
    assert names.user_frames(102, (0x10, 0x20)) == parent and sym.namings == 3


def test_a_stacks_frames_field_is_the_json_of_its_frames_encoded_once():
    names = StackNames(CountingSymbolizer())
    stack = (("main", "app", "user"), ('say "hi"', "", "kernel"))
    field = names.stack_json(stack)
    assert json.loads("{" + field + "}") == {"frames": [{"name": "main", "module": "app", "kind": "user"},
                                                       {"name": 'say "hi"', "module": "", "kind": "kernel"}]}
    assert names.stack_json(stack) is field


def test_a_whole_stack_is_kept_per_maps_snapshot_and_not_when_a_jit_named_a_frame():
    sym = CountingSymbolizer()
    names = StackNames(sym)
    kernel, user = (0x1000).to_bytes(8, "little"), (0x10, 0x20)
    key = names.stack_key(100, kernel, user)
    assert names.known(key) is None
    kept = names.keep(key, [("main", "app", "user"), ("f10", "app", "user")])
    assert names.known(names.stack_key(100, kernel, user)) is kept
    assert names.known(names.stack_key(101, kernel, user)) is kept     # the fork child's shared snapshot
    sym.snapshots[100] = SimpleNamespace(taken=2.0)                    # retaken: named again
    assert names.known(names.stack_key(100, kernel, user)) is None
    # a stack with no user addresses does not depend on the process
    assert names.stack_key(100, kernel, -14) == names.stack_key(555, kernel, -14)
    jit = names.keep(names.stack_key(100, kernel, (0x30,)), [("jitted", "perf-100.map", "user")])
    assert names.known(names.stack_key(100, kernel, (0x30,))) is None and jit == (("jitted", "perf-100.map", "user"),)


def test_frames_hash_and_compare_as_the_tuple_of_their_frames():
    frames = [("main", "app", "user"), ("work", "app", "user"), ("main", "app", "user")]
    stack = Frames(frames)
    assert stack == tuple(frames) and hash(stack) == hash(tuple(frames))
    assert {tuple(frames): 1}[stack] == 1 and {stack: 2}[tuple(frames)] == 2
    assert stack.distinct == {("main", "app", "user"), ("work", "app", "user")}


def test_kernel_stacks_that_differ_in_the_interrupted_pc_alone_share_their_named_stack():
    """The leaf of a sampled kernel stack is wherever the interrupt found the CPU: two pcs in the same
    function are the same whole stack (named once), a pc in another function another stack."""
    sym = CountingSymbolizer()
    names = StackNames(sym)

    def kernel(*addrs: int) -> bytes:   # innermost first, as a sample holds them
        return b"".join(a.to_bytes(8, "little") for a in addrs)

    first, same_function, other = kernel(0x1010, 0x2040, 0x3080), kernel(0x10f0, 0x2040, 0x3080), kernel(0x1110, 0x2040, 0x3080)
    key = names.stack_key(100, first, -14)
    stack = names.keep(key, list(names.kernel_frames(first)))
    assert [f[0] for f in stack] == ["k30", "k20", "k10"]
    assert names.stack_key(100, same_function, -14) == key and names.known(names.stack_key(100, same_function, -14)) is stack
    assert names.kernel_frames(same_function) == stack
    assert names.stack_key(100, other, -14) != key
    assert [f[0] for f in names.kernel_frames(other)] == ["k30", "k20", "k11"]
    assert sym.kernel_namings == 5   # each address once: three of the first, the two new leaves
    assert names.kernel_frames(b"") == ()
