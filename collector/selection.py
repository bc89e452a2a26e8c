"""A selection of stack records: one metric (`source`) and any of its hosts, runs, cgroups and process
names (comm), each parameter repeatable and meaning "any of" (none given: all), over a time range
(`range`, or `since`/`until` in unix seconds). /api/profile merges a selection into one profile,
/api/profile/diff compares two (each side a URL-encoded query string of these parameters), and the
profile explorer page keeps two of them in its URL. An empty value (a form's empty box) is no filter."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qsl, urlencode

from werkzeug.datastructures import MultiDict

from collector.api import BadQuery, cgroup_path
from collector.profiles import BadRange, RangeProfile, bound, parse_range, selection_profile

if TYPE_CHECKING:
    from collector.store import Store

PARAMS = ("source", "host", "run_id", "cgroup", "cgroup_match", "comm", "range", "since", "until")
MAX_VALUES = 100  # values of one repeatable parameter
NAME_MAX = {"source": 128, "host": 255, "run_id": 128, "comm": 255}  # as the payload (or a comm) allows
QUERY_MAX = 64 * 1024  # a side of a diff: its query string's characters

Read = TypeVar("Read")


@dataclass(frozen=True)
class Selection:
    source: str
    hosts: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()
    cgroup_tree: bool = False  # each cgroup and every group below it
    comms: tuple[str, ...] = ()
    range_text: str | None = None  # as parse_range reads it; None: the default (the whole run)
    since: float | None = None
    until: float | None = None

    def query(self) -> list[tuple[str, str]]:
        """The selection as query parameters (parse reads them back to an equal selection)."""
        pairs = [("source", self.source)] + [("host", h) for h in self.hosts] + [("run_id", r) for r in self.run_ids]
        pairs += [("cgroup", c) for c in self.cgroups] + ([("cgroup_match", "tree")] if self.cgroup_tree else [])
        pairs += [("comm", c) for c in self.comms] + ([("range", self.range_text)] if self.range_text else [])
        return pairs + [(k, repr(v)) for k, v in (("since", self.since), ("until", self.until)) if v is not None]

    def query_text(self) -> str:
        return urlencode(self.query())

    def echo(self) -> dict:
        """The selection as JSON (what an answer says it read)."""
        return {"source": self.source, "host": list(self.hosts), "run_id": list(self.run_ids),
                "cgroup": list(self.cgroups), "cgroup_match": "tree" if self.cgroup_tree else "exact",
                "comm": list(self.comms), "range": self.range_text, "since": self.since, "until": self.until}

    def profile(self, store: Store) -> RangeProfile:
        """The merged profile of the selection (profiles.selection_profile)."""
        return selection_profile(store, self.source, self.hosts, self.run_ids, self.range_text, self.since,
                                 self.until, self.cgroups, self.cgroup_tree, self.comms)

    def one_stream(self) -> bool:
        return len(self.hosts) == 1 and len(self.run_ids) == 1

    def title(self) -> str:
        """In words: "cpuprofile on lab-pc-01, run R1"."""
        hosts = ", ".join(self.hosts[:3]) + (" …" if len(self.hosts) > 3 else "") if self.hosts else "every host"
        runs = "" if not self.run_ids else (" run " if len(self.run_ids) == 1 else " runs ") + ", ".join(self.run_ids[:3])
        return f"{self.source} on {hosts}{',' + runs if runs else ''}"


def parse(args: MultiDict[str, str], prefix: str = "", source: str | None = None) -> Selection:
    """The selection the parameters name (each PARAMS name, after `prefix`; source: the metric, instead of
    a parameter); BadRange says what is wrong. Other parameters are the caller's to refuse."""
    def values(name: str) -> tuple[str, ...]:
        found = tuple(dict.fromkeys(v for v in args.getlist(prefix + name) if v))
        if len(found) > MAX_VALUES:
            raise BadRange(f"at most {MAX_VALUES} values of {prefix + name}")
        limit = NAME_MAX.get(name)
        if limit is not None and any(len(v) > limit or not v.isprintable() for v in found):
            raise BadRange(f"{prefix + name} must be 1..{limit} printable characters")
        return found

    sources = (source,) if source else values("source")
    if len(sources) != 1:
        raise BadRange(f"{prefix}source names the metric, once (e.g. {prefix}source=cpuprofile)")
    match = args.get(prefix + "cgroup_match") or "exact"
    if match not in ("exact", "tree"):
        raise BadRange(f"{prefix}cgroup_match must be exact or tree")
    try:
        cgroups = tuple(dict.fromkeys(cgroup_path(c) for c in values("cgroup")))
    except BadQuery as e:
        raise BadRange(f"{prefix}{e}") from None
    if args.get(prefix + "cgroup_match") and not cgroups and prefix + "cgroup" not in args:
        raise BadRange(f"{prefix}cgroup_match needs a {prefix}cgroup")
    range_text = (args.get(prefix + "range") or "").strip() or None
    parse_range(range_text)  # BadRange for a bad one
    since, until = bound(prefix + "since", args.get(prefix + "since")), bound(prefix + "until", args.get(prefix + "until"))
    if since is not None and until is not None and since > until:
        raise BadRange(f"{prefix}since is after {prefix}until")
    return Selection(sources[0], values("host"), values("run_id"), cgroups, match == "tree", values("comm"),
                     range_text, since, until)


def parse_query(text: str) -> Selection:
    """A selection from a query string (a diff's side): its parameters are PARAMS and no other."""
    if len(text) > QUERY_MAX:
        raise BadRange(f"longer than {QUERY_MAX} characters")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True, max_num_fields=len(PARAMS) * MAX_VALUES)
    except ValueError:
        raise BadRange("not a query string of selection parameters (source=...&host=...)") from None
    args = MultiDict(pairs)
    unknown(args, PARAMS)
    if any("\x00" in v for _k, v in pairs):
        raise BadRange("NUL in the selection")
    return parse(args)


def unknown(args: Iterable[str], known: Iterable[str]) -> None:
    """BadRange naming the parameters not in `known`."""
    extra = sorted(set(args) - set(known))
    if extra:
        raise BadRange(f"unknown parameter(s): {', '.join(k[:40] for k in extra[:5])}; known: {', '.join(sorted(known))}")


def at_once(reads: Sequence[Callable[[], Read]]) -> list[Read]:
    """What each call returns, the calls run at once (all but the first in threads of their own): a
    profile's query gives up the GIL while the database works, so on two CPUs a diff's two sides take
    about as long as one. A failure is raised once every call is done, the first in their order (as
    when they ran one after the other)."""
    if len(reads) < 2:
        return [read() for read in reads]
    with ThreadPoolExecutor(max_workers=len(reads) - 1) as pool:
        later = [pool.submit(read) for read in reads[1:]]
        first = reads[0]()
        return [first, *(future.result() for future in later)]
