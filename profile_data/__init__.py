"""Profiles: weighted call stacks, their call tree, top functions, a differential, folded text.

Pure Python (no Qt, no Flask): the window, the collector and the tests share it. Public API:

    Frame(name, module="", kind="user")   one frame; kind is "user", "kernel", "python" (a CPython
                                          function) or "process" (the root frame a stack starts with:
                                          its comm)
    Profile(unit)                         stacks (tuples of Frame, root first) -> weight, in `unit`:
                                          "samples", "ns" or "bytes"
        .add(stack, weight)  .remove(stack, weight)  .merge(other)  .subtract(other)  .total  .stacks
        .copy()
        .trimmed(max_stacks)              the heaviest stacks, the rest summed per root as "[other stacks]"
    parse_folded(text, unit) -> Profile   Brendan Gregg's folded lines ("a;b;c 12"); "name_[k]" is a
                                          kernel frame, "name [module]" a frame in module
    to_folded(profile) -> str             every stack as a folded line, heaviest first (integer weights)
    stack_of(record) -> stack | None      the root-first stack of one metric record (offcpu and compmem
                                          rows of level "stack", cpuprofile "stack" records)
    from_records(records, weight, unit)   a Profile of every stack record, weighted by record[weight]
                                          (scaled to the unit: "total_ms" -> ns)
    Node / call_tree(profile) -> Node     the call tree: total and self per node, children sorted by
                                          frame name (as flamegraph.pl sorts, so two graphs compare);
                                          .add(stack, w) / .remove(stack, w) keep it up to date, .ordered()
    Functions(profile=None)               self and total weight per frame, kept up to date by .add/.remove
    top_functions(profile) -> [FunctionStat]   self and total weight per frame, with % of the profile
    differential(baseline, current) -> [FunctionChange]   per frame, the change of its share (points);
                                          either side a Profile or a Functions
    Node.child(frame) -> Node | None       the same path in another tree (a baseline), for per-node change
    views: simplify / simplified (Python stacks without the interpreter's frames, blocks without the
    scheduler's), bottom_up, sandwich (callers and callees of one function, and its butterfly table),
    functions_in (the top functions of a zoomed node, of the stacks that match a search)

Weights are numbers in the profile's unit; FunctionStat and FunctionChange give shares in % of
Profile.total, a change in percentage points. A node's share in a flame graph is node.total / root.total.
"""

from profile_data.folded import parse_folded, to_folded
from profile_data.model import KINDS, UNITS, Frame, Profile, Stack
from profile_data.records import from_records, stack_of
from profile_data.tree import FunctionChange, Functions, FunctionStat, Node, call_tree, differential, top_functions
from profile_data.views import Sandwich, bottom_up, functions_in, sandwich, simplified, simplify, tree_stacks

__all__ = [
    "KINDS", "UNITS", "Frame", "FunctionChange", "Functions", "FunctionStat", "Node", "Profile", "Stack", "call_tree",
    "differential", "from_records", "parse_folded", "stack_of", "to_folded", "top_functions",
    "Sandwich", "bottom_up", "functions_in", "sandwich", "simplified", "simplify", "tree_stacks",
]
