"""bcctool.ksymstub: BCC compiles with a two-line /proc/kallsyms and rewrites its probe reads exactly as
with the real one; the compiling thread is back in its own mount namespace, with the real table, after."""

import os
import subprocess
import textwrap

import pytest
from helpers import PYTHON, ROOT, bpf_unavailable_reason

from bcctool import ksymstub

pytestmark = pytest.mark.bpf

# BCC prints the rewritten C (DEBUG_PREPROCESSOR); what it decides from kallsyms shows in it
COMPILE = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from bcc import BPF
    from bcctool import ksymstub
    ksymstub.STUB = {stub!r}
    TEXT = '''
    TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {{
        u64 v = 0;
        bpf_probe_read_user(&v, sizeof(v), (void *)args->__syscall_nr);
        return v == 1;
    }}'''
    with ksymstub.stub_kallsyms() as stubbed:
        b = BPF(text=TEXT, debug=0x4)
    print("stubbed", stubbed, file=sys.stderr)
    b.cleanup()
""")


def rewritten(stub: bytes) -> str:
    reason = bpf_unavailable_reason()
    if reason and not os.environ.get("CI"):
        pytest.skip(reason)
    out = subprocess.run([PYTHON, "-c", COMPILE.format(root=ROOT, stub=stub)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


def test_the_stub_keeps_bccs_rewrites_as_with_the_real_table():
    if not ksymstub.kernel_has_helpers():
        pytest.skip("this kernel's BTF does not name both helpers: BCC reads the real table")
    text = rewritten(ksymstub.STUB)
    assert "stubbed True" in text
    assert "bpf_probe_read_user(" in text
    assert "#define bpf_probe_read_kernel bpf_probe_read" not in text


def test_a_stub_without_the_helpers_would_show_in_the_rewrite():
    # the check above can fail: a table without the names makes BCC fall back to bpf_probe_read
    text = rewritten(b"ffffffff81000000 T some_other_function\n")
    assert "stubbed True" in text
    assert "#define bpf_probe_read_kernel bpf_probe_read" in text


def test_the_thread_is_back_in_its_namespace_with_the_real_table(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("not root")
    before = os.readlink("/proc/thread-self/ns/mnt")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with ksymstub.stub_kallsyms() as stubbed:
            with open("/proc/kallsyms", "rb") as f:
                inside = f.read()
            assert os.getcwd() == str(tmp_path)
        with open("/proc/kallsyms", "rb") as f:
            after = f.read(1 << 20)
        assert os.getcwd() == str(tmp_path)
    finally:
        os.chdir(cwd)
    assert os.readlink("/proc/thread-self/ns/mnt") == before
    if ksymstub.kernel_has_helpers():
        assert stubbed and inside == ksymstub.STUB
    assert after != ksymstub.STUB and after.count(b"\n") > 1000
    assert not [n for n in os.listdir("/tmp") if n.startswith("bcctool-kallsyms-")]
