"""bcctool.cgroups without BPF: the v2 mount from mountinfo, the short names of well-known paths, and an
id resolved to its path (and again after a group is made)."""

import json
import os

import pytest

from bcctool import cgroups

HYBRID = """\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
35 33 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
"""
V1_ONLY = """\
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
35 33 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
"""


@pytest.mark.parametrize(("text", "mount"), [
    (HYBRID, "/sys/fs/cgroup/unified"),
    ("30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n", "/sys/fs/cgroup"),
    ("30 1 0:26 / /mnt/my\\040cg rw - cgroup2 none rw\n", "/mnt/my cg"),
    (V1_ONLY, None),
])
def test_v2_mount_from_mountinfo(tmp_path, text, mount):
    path = tmp_path / "mountinfo"
    path.write_text(text)
    assert cgroups.v2_mount(str(path)) == mount


def test_no_cgroup2_is_one_reason(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(V1_ONLY)
    with pytest.raises(ValueError, match="^no cgroup v2 hierarchy is mounted"):
        cgroups.resolve_target("/sys/fs/cgroup/x", mountinfo=str(mountinfo))


@pytest.mark.parametrize(("path", "names"), [
    ("/system.slice/nginx.service", {"unit": "nginx.service"}),
    ("/user.slice/user-1000.slice/session-3.scope", {"unit": "session-3.scope", "user": "1000"}),
    ("/user.slice/user-1000.slice", {"unit": "user-1000.slice", "user": "1000"}),
    ("/system.slice/docker-4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8.scope",
     {"container": "4f1a2b3c4d5e", "runtime": "docker"}),
    ("/docker/4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8",
     {"container": "4f1a2b3c4d5e", "runtime": "docker"}),
    ("/system.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
     {"container": "0123456789ab", "runtime": "cri"}),
    ("/machine.slice/libpod-aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999.scope",
     {"container": "aaaabbbbcccc", "runtime": "podman"}),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ef_1234_567890abcdef.slice/"
     "cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
     {"container": "0123456789ab", "runtime": "cri"}),
    ("/kubepods/besteffort/pod1234abcd-5678-90ef-1234-567890abcdef/"
     "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
     {"pod": "1234abcd-5678-90ef-1234-567890abcdef", "container": "0123456789ab"}),
    ("/", {}),
    ("/lab/job-7", {}),
])
def test_short_names(path, names):
    assert cgroups.short_names(path) == names


@pytest.mark.skipif(os.geteuid() != 0 or cgroups.v2_mount() is None, reason="needs root and cgroup2")
def test_id_resolves_to_path_and_new_groups_are_found(test_cgroups):
    names = cgroups.CgroupNames(rewalk_after=0)
    assert names.path(cgroups.cgroup_id(test_cgroups.mount)) == "/"
    made = test_cgroups.make("later")
    cgid = cgroups.cgroup_id(made)
    assert names.fields(cgid) == {"cgroup_id": cgid, "cgroup": test_cgroups.rel(made)}
    assert names.path(1 << 60) == ""


def test_resolve_target_refuses_what_is_not_a_v2_group(tmp_path):
    mount = str(tmp_path)
    with pytest.raises(ValueError, match="not under"):
        cgroups.resolve_target("/etc", mount=mount)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not a cgroup directory"):
        cgroups.resolve_target("plain", mount=mount)
    (tmp_path / "g" / "h").mkdir(parents=True)
    (tmp_path / "g" / "h" / "cgroup.procs").write_text("")
    path, cgid, level = cgroups.resolve_target("g/h", mount=mount)
    assert (path, cgid, level) == (str(tmp_path / "g" / "h"), os.stat(tmp_path / "g" / "h").st_ino, 2)


def test_fields_json_is_the_fields_encoded_kept_once_the_path_is_known(tmp_path):
    names = cgroups.CgroupNames(mount=str(tmp_path), rewalk_after=1000)
    known = tmp_path / "docker" / ("ab" * 32)
    known.mkdir(parents=True)
    cgid = os.stat(known).st_ino
    text = names.fields_json(cgid)   # the first miss walks the mount
    assert json.loads("{" + text + "}") == names.fields(cgid) == {
        "cgroup_id": cgid, "cgroup": "/docker/" + "ab" * 32, **cgroups.short_names("/docker/" + "ab" * 32)}
    assert names.fields_json(cgid) is text
    later = tmp_path / "later"
    later.mkdir()
    late = os.stat(later).st_ino
    assert json.loads("{" + names.fields_json(late) + "}") == {"cgroup_id": late, "cgroup": ""}   # not walked again yet
    names.rewalk_after = 0
    assert json.loads("{" + names.fields_json(late) + "}") == {"cgroup_id": late, "cgroup": "/later"}   # not kept unknown
