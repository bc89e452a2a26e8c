"""bcctool.stacknames: each distinct stack is named once and encoded once; a fork child named from its
parent's maps snapshot shares the parent's named stacks, and a new snapshot (after a dlopen) names
again."""

import json
from types import SimpleNamespace

from bcctool.stacknames import StackNames
from bcctool.symbols import Frame


class CountingSymbolizer:
    """maps() and user_stack() as bcctool.symbols.Symbolizer answers them, counting the namings."""

    def __init__(self) -> None:
        self.snapshots = {100: SimpleNamespace(taken=1.0)}
        self.snapshots[101] = self.snapshots[100]   # a fork child: inherit() shares the parent's snapshot
        self.namings = 0

    def maps(self, pid: int):
        return self.snapshots.get(pid)

    def user_stack(self, pid: int, pcs: list[int]) -> list[Frame]:
        self.namings += 1
        return [Frame(f"f{pc:x}", "app") for pc in pcs]


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
