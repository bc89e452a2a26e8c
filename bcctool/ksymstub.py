"""BCC's compile without its read of the whole kernel symbol table.

BCC 0.26 reads all of /proc/kallsyms on every compile (b_frontend_action.cc: 122,000 symbols into a
vector and a hash of strings, then freed): about 0.2 s here, a third or more of a metric's time to its
first record. It asks that table two questions only: do `bpf_probe_read_kernel` and `bpf_probe_read_user`
exist (if not, it rewrites them to the old `bpf_probe_read`). The kernel's BTF answers the same
questions (its string table names every kernel function) in a few milliseconds. When it says yes to
both, the compile runs with /proc/kallsyms bind-mounted to a two-line stub naming just those two, in a
mount namespace of the compiling thread's own; the thread goes back to its namespace right after, so
everything else (symbolizing stacks, BCC's resolvers) reads the real table. Where any step is not
possible (no BTF, no CAP_SYS_ADMIN, a security module refusing the mount) BCC reads the real table, as
before; BCCTOOL_FULL_KALLSYMS=1 asks for that too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import tempfile
from collections.abc import Iterator

BTF_VMLINUX = "/sys/kernel/btf/vmlinux"
HELPERS = (b"bpf_probe_read_kernel", b"bpf_probe_read_user")   # what BCC looks up in kallsyms
# Above x86-64's user half, as BCC requires of a kernel address; BCC only tests that the name is found.
STUB = b"".join(b"ffffffff81000000 T " + name + b"\n" for name in HELPERS)

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MNT_DETACH = 2
BTF_MAGIC = 0xEB9F


def kernel_has_helpers(path: str = BTF_VMLINUX) -> bool:
    """True when the kernel's BTF names both helpers (its string section, read alone)."""
    try:
        with open(path, "rb") as f:
            magic, _ver, _flags, hdr_len, _type_off, _type_len, str_off, str_len = struct.unpack(
                "<HBBIIIII", f.read(24))
            if magic != BTF_MAGIC:
                return False
            f.seek(hdr_len + str_off)
            strings = f.read(str_len)
    except (OSError, struct.error):
        return False
    return all(b"\0" + name + b"\0" in strings for name in HELPERS)


@contextlib.contextmanager
def stub_kallsyms() -> Iterator[bool]:
    """Within: /proc/kallsyms, for the calling thread only, is the two-line stub (yields True), or the
    real table when that could not be arranged (yields False)."""
    if os.environ.get("BCCTOOL_FULL_KALLSYMS") or not kernel_has_helpers():
        yield False
        return
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        own_ns = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        yield False
        return
    cwd = os.open(".", os.O_PATH | os.O_CLOEXEC)  # going back to a namespace resets the working directory
    try:
        if libc.unshare(CLONE_NEWNS) != 0:
            yield False
            return
        try:
            # slave first: a bind mount made under a shared mount would also appear in the namespace
            # it was copied from
            stubbed = libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None) == 0 and _bind_stub(libc)
            yield stubbed
        finally:
            if libc.setns(own_ns, CLONE_NEWNS) != 0:
                libc.umount2(b"/proc/kallsyms", MNT_DETACH)   # stay, but with the real table
            os.fchdir(cwd)
    finally:
        os.close(cwd)
        os.close(own_ns)


def _bind_stub(libc: ctypes.CDLL) -> bool:
    # a bind needs a linked file in a mounted filesystem (not a memfd or an O_TMPFILE); unlinked at
    # once, the mount keeps it until the namespace ends with the compile
    fd, path = tempfile.mkstemp(prefix="bcctool-kallsyms-")
    try:
        os.write(fd, STUB)
        return libc.mount(path.encode(), b"/proc/kallsyms", None, MS_BIND, None) == 0
    finally:
        os.close(fd)
        os.unlink(path)
