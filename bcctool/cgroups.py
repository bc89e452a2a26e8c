"""cgroup v2: where it is mounted, a cgroup id as its path, and a short service/container name.

A cgroup's id (what bpf_get_current_cgroup_id() returns) is the inode number of its directory in the
v2 hierarchy, so a path is found by walking the mount once and again when an unknown id shows up. The
mount is read from /proc/self/mountinfo: a hybrid hierarchy has it at /sys/fs/cgroup/unified, a pure
v2 machine at /sys/fs/cgroup, and a v1-only machine has none.
"""

from __future__ import annotations

import functools
import json
import os
import re

MOUNTINFO = "/proc/self/mountinfo"
MAX_ENCODED = 4096   # cgroups whose fields are kept encoded
NO_CGROUP2 = "no cgroup v2 hierarchy is mounted (cgroup features need cgroup2)"


def v2_mount(mountinfo: str = MOUNTINFO) -> str | None:
    """The first cgroup2 mount point, or None. Fields: ... mount-point ... - fstype source options."""
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return _unescape(left.split()[4])
    except OSError:
        pass
    return None


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def cgroup_id(directory: str) -> int:
    """The id of the cgroup at `directory` (its inode number)."""
    return os.stat(directory).st_ino


def resolve_target(text: str, mount: str | None = None, mountinfo: str = MOUNTINFO) -> tuple[str, int, int]:
    """A --cgroup argument (absolute, or relative to the v2 mount) as (directory, id, level below the
    root); ValueError with a one-line reason when it is not a cgroup of the v2 hierarchy."""
    mount = mount if mount is not None else v2_mount(mountinfo)
    if mount is None:
        raise ValueError(NO_CGROUP2)
    path = os.path.realpath(text if os.path.isabs(text) else os.path.join(mount, text))
    if path != mount and not path.startswith(mount.rstrip("/") + "/"):
        raise ValueError(f"not under the cgroup v2 mount {mount}: {text}")
    if not os.path.isfile(os.path.join(path, "cgroup.procs")):
        raise ValueError(f"not a cgroup directory of the v2 hierarchy: {text}")
    rel = os.path.relpath(path, mount)
    level = 0 if rel == "." else rel.count("/") + 1
    return path, cgroup_id(path), level


def own_cgroup(pid: int | str = "self") -> str | None:
    """The v2 path (relative to the root, '/' first) of a process, from /proc/PID/cgroup's 0:: line."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


_DOCKER = re.compile(r"(?:^|/)docker-([0-9a-f]{12,64})\.scope$|(?:^|/)docker/([0-9a-f]{12,64})$")
_CRI = re.compile(r"(?:^|/)cri-(?:containerd|o)-([0-9a-f]{12,64})\.scope$|(?:^|/)crio-([0-9a-f]{12,64})\.scope$")
_LIBPOD = re.compile(r"(?:^|/)libpod-([0-9a-f]{12,64})\.scope$")
_KUBEPOD = re.compile(r"(?:^|/)kubepods[^/]*(?:/[^/]+)*?/pod([0-9a-f_-]{8,})(?:\.slice)?(?:/([^/]+))?$")
_UNIT = re.compile(r"(?:^|/)([^/]+\.(?:service|scope|socket|mount|swap))$")
_USER = re.compile(r"(?:^|/)user-(\d+)\.slice")


def short_names(path: str) -> dict[str, str]:
    """{'container': ...} and/or {'unit': ...} for the well-known shapes of `path` (relative to the
    root); {} for anything else. Container ids are cut to 12 characters as docker ps shows them."""
    path = path.rstrip("/")
    for pattern, runtime in ((_DOCKER, "docker"), (_CRI, "cri"), (_LIBPOD, "podman")):
        m = pattern.search(path)
        if m:
            cid = next(g for g in m.groups() if g)
            return {"container": cid[:12], "runtime": runtime}
    m = _KUBEPOD.search(path)
    if m:
        pod = m.group(1).replace("_", "-")
        inner = m.group(2)
        names = {"pod": pod}
        if inner:
            inner_names = short_names(inner)
            names["container"] = inner_names.get("container", inner[:12])
        return names
    m = _UNIT.search(path)
    if m:
        names = {"unit": m.group(1)}
        user = _USER.search(path)
        if user:
            names["user"] = user.group(1)
        return names
    user = _USER.search(path)
    if user:
        return {"unit": f"user-{user.group(1)}.slice", "user": user.group(1)}
    return {}


@functools.lru_cache(maxsize=4096)
def _short_names_of(path: str) -> dict[str, str]:
    """short_names(), worked out once a path: every per-process row of every interval asks (six regular
    expressions a row, 750 rows an interval under a fork-heavy load). Callers copy it, never change it."""
    return short_names(path)


class CgroupNames:
    """cgroup id -> path under the v2 mount ('/' for the root), walked once and again on an unknown id
    (at most once a second, so a stream of ids of cgroups already gone costs one walk)."""

    def __init__(self, mount: str | None = None, rewalk_after: float = 1.0) -> None:
        self.mount = mount if mount is not None else v2_mount()
        self.rewalk_after = rewalk_after
        self._paths: dict[int, str] = {}
        self._json: dict[int, str] = {}   # cgroup id -> fields_json()
        self._walked_at = -1e9

    def path(self, cgid: int) -> str:
        """The cgroup's path, or '' when it is unknown (gone, or no cgroup2)."""
        if self.mount is None or not cgid:
            return ""
        found = self._paths.get(cgid)
        if found is None:
            import time  # noqa: PLC0415 - only on a miss

            now = time.monotonic()
            if now - self._walked_at >= self.rewalk_after:
                self._walked_at = now
                self._walk()
            found = self._paths.get(cgid, "")
        return found

    def fields(self, cgid: int) -> dict[str, object]:
        """What every per-process record carries: cgroup_id, cgroup and the short names known."""
        path = self.path(cgid)
        return {"cgroup_id": cgid, "cgroup": path, **_short_names_of(path)}

    def fields_json(self, cgid: int) -> str:
        """fields() as the `"name":value` pairs of a JSON object, encoded once a cgroup (an id is never
        reused) once its path is known: a profiler's records repeat them record after record."""
        text = self._json.get(cgid)
        if text is None:
            fields = self.fields(cgid)
            text = json.dumps(fields, separators=(",", ":"))[1:-1]
            if fields["cgroup"]:
                if len(self._json) >= MAX_ENCODED:
                    self._json.clear()
                self._json[cgid] = text
        return text

    def _walk(self) -> None:
        root = self.mount
        for directory, _subdirs, _files in os.walk(root):
            try:
                ino = os.stat(directory).st_ino
            except OSError:
                continue
            rel = os.path.relpath(directory, root)
            self._paths[ino] = "/" if rel == "." else "/" + rel


CGROUP_FIELDS = ("cgroup_id", "cgroup", "unit", "user", "container", "runtime", "pod")


def by_cgroup(rows: list[dict], summed: tuple[str, ...]) -> list[dict]:
    """Per-process rows merged per cgroup (--group-by cgroup): the cgroup's fields, the `summed` fields
    added up, and `processes`, how many distinct pids were in it."""
    groups: dict[int, dict] = {}
    pids: dict[int, set] = {}
    for r in rows:
        g = groups.get(r["cgroup_id"])
        if g is None:
            g = groups[r["cgroup_id"]] = {k: r[k] for k in CGROUP_FIELDS if k in r}
            g.update({k: 0 for k in summed})
        for k in summed:
            g[k] += r.get(k, 0)
        pids.setdefault(r["cgroup_id"], set()).add(r.get("pid"))
    for cgid, g in groups.items():
        g["processes"] = len(pids[cgid])
    return list(groups.values())


def threads_in(directory: str) -> list[int]:
    """Every thread id in the cgroup at `directory` and the groups below it (their cgroup.threads)."""
    tids = []
    for current, _subdirs, _files in os.walk(directory):
        try:
            with open(os.path.join(current, "cgroup.threads")) as f:
                tids += [int(line) for line in f if line.strip()]
        except (OSError, ValueError):
            continue
    return tids
