"""tcpconnlat against connects whose count, ports and wall time a child process measured itself."""

import re
import socket
import subprocess

import pytest
from helpers import human_output, metric_on_child, run_workload

N = 50   # connects per address family
CONNECT_CHILD = """
import json, socket, sys, time
v4_port, v6_port, closed4, closed6, bind_port = map(int, sys.argv[1:6])
n = int(sys.argv[6])
sys.stdin.readline()
done = []
def connect(family, addr, port, bind=0):
    s = socket.socket(family, socket.SOCK_STREAM)
    if bind:
        s.bind((addr, bind))
    t0 = time.perf_counter()
    try:
        s.connect((addr, port))
        status = "ok"
    except ConnectionRefusedError:
        status = "failed"
    wall_ms = (time.perf_counter() - t0) * 1e3
    done.append({"ip": 4 if family == socket.AF_INET else 6, "lport": s.getsockname()[1], "dport": port,
                 "wall_ms": wall_ms, "status": status})
    s.close()
for i in range(n):
    connect(socket.AF_INET, "127.0.0.1", v4_port, bind_port if i == 0 else 0)
    connect(socket.AF_INET6, "::1", v6_port)
connect(socket.AF_INET, "127.0.0.1", closed4)
connect(socket.AF_INET6, "::1", closed6)
print(json.dumps({"comm": open("/proc/self/comm").read().strip(), "connects": done}), flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


def free_port(family: int, addr: str) -> int:
    """A port nothing listens on (bound, then closed) — a connect to it is refused."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def listeners():
    v4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    v4.bind(("127.0.0.1", 0))
    v4.listen(4 * N)
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    v6.bind(("::1", 0))
    v6.listen(4 * N)
    yield v4.getsockname()[1], v6.getsockname()[1]
    v4.close()
    v6.close()


def traced_connects(listeners, *tool_args: str, lport_filter: bool = False) -> tuple[list, list, int, int]:
    """(event records, the child's report {comm, connects: its own measurements}, child pid, the port
    its first IPv4 connect bound)."""
    bind_port = free_port(socket.AF_INET, "127.0.0.1")
    if lport_filter:
        tool_args += ("--lport", str(bind_port))
    ports = [*listeners, free_port(socket.AF_INET, "127.0.0.1"), free_port(socket.AF_INET6, "::1"), bind_port]
    child = run_workload(CONNECT_CHILD, *map(str, ports), str(N))
    events, report = traced_report(child, *tool_args)
    return events, report, child.pid, bind_port


def traced_report(child: subprocess.Popen, *tool_args: str) -> tuple[list, object]:
    """(the event records of tcpconnlat on the run_workload child, the child's JSON report)."""
    tool, report = metric_on_child(child, "tcpconnlat", "0.3", *tool_args)
    assert not tool.lost_in_the_tool(), tool.of_kind("lost")
    return tool.of_kind("event"), report


def test_every_connect_with_pid_ports_family_and_latency(listeners):
    events, report, pid, _ = traced_connects(listeners)
    measured = report["connects"]
    v4_port, v6_port = listeners
    ok = [e for e in events if e["status"] == "ok"]
    assert len([e for e in ok if e["ip"] == 4]) == N
    assert len([e for e in ok if e["ip"] == 6]) == N
    assert {e["pid"] for e in events} == {pid}
    # its comm, shared with this test's python, carries its command line's hint (bcctool/procnames.py)
    assert {e["comm"] for e in events} == {f"{report['comm']} (-c)"}
    by_port = {(m["ip"], m["lport"]): m for m in measured}
    for e in ok:
        m = by_port[(e["ip"], e["lport"])]            # the child's own local port for this connect
        assert e["dport"] == (v4_port if e["ip"] == 4 else v6_port)
        assert (e["saddr"], e["daddr"]) == (("127.0.0.1",) * 2 if e["ip"] == 4 else ("::1",) * 2)
        assert 0 < e["latency_ms"] < m["wall_ms"], (e, m)
    failed = [e for e in events if e["status"] == "failed"]
    refused = [m for m in measured if m["status"] == "failed"]
    assert len(refused) == 2
    assert sorted((e["ip"], e["dport"]) for e in failed) == sorted((m["ip"], m["dport"]) for m in refused)


def test_family_and_min_latency_filters(listeners):
    events, report, pid, _ = traced_connects(listeners, "-4", "--min-ms", "5000")
    measured = report["connects"]
    # loopback connects take well under 5 s, so only the refused IPv4 connect passes: failures always do
    assert [(e["ip"], e["status"]) for e in events] == [(4, "failed")]
    assert events[0]["dport"] == next(m["dport"] for m in measured if m["ip"] == 4 and m["status"] == "failed")


def test_local_port_filter(listeners):
    events, report, pid, bind_port = traced_connects(listeners, lport_filter=True)
    assert [(e["lport"], e["ip"], e["status"], e["pid"]) for e in events] == [(bind_port, 4, "ok", pid)]
    assert [m["lport"] for m in report["connects"]].count(bind_port) == 1


GIVE_UP_S = 0.3
GIVE_UP_CHILD = """
import json, socket, sys, time
ports = {4: int(sys.argv[1]), 6: int(sys.argv[2])}
give_up = float(sys.argv[3])
sys.stdin.readline()
kept, done = [], []
for ip, family, addr in ((4, socket.AF_INET, "127.0.0.1"), (6, socket.AF_INET6, "::1")):
    for _ in range(3):                   # the first connect fills the accept queue; the next SYN is dropped
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(give_up)
        t0 = time.perf_counter()
        try:
            s.connect((addr, ports[ip]))
        except TimeoutError:
            lport = s.getsockname()[1]
            s.close()                    # SYN_SENT -> CLOSE: the connect given up
            done.append({"ip": ip, "lport": lport, "wall_ms": (time.perf_counter() - t0) * 1e3})
            break
        kept.append(s)
print(json.dumps(done), flush=True)
sys.stdin.readline()
"""


def test_connect_given_up_is_failed_with_its_wait():
    """A connect whose SYN is never answered (the listener's accept queue is full, so the kernel drops
    it), given up by the child after GIVE_UP_S: one failed event each, as long as the child waited."""
    full = []
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.bind((addr, 0))
        s.listen(0)                          # one connection queued, never accepted
        full.append(s)
    ports = {4: full[0].getsockname()[1], 6: full[1].getsockname()[1]}
    try:
        events, given_up = traced_report(run_workload(GIVE_UP_CHILD, str(ports[4]), str(ports[6]), str(GIVE_UP_S)))
    finally:
        for s in full:
            s.close()
    print(f"given up: {given_up}; events: {events}")
    assert sorted(m["ip"] for m in given_up) == [4, 6], "a connect to a full accept queue was answered"
    failed = [e for e in events if e["status"] == "failed"]
    assert sorted((e["ip"], e["lport"]) for e in failed) == sorted((m["ip"], m["lport"]) for m in given_up)
    wall = {(m["ip"], m["lport"]): m["wall_ms"] for m in given_up}
    for e in failed:
        assert e["dport"] == ports[e["ip"]]
        assert GIVE_UP_S * 1e3 <= e["latency_ms"] <= wall[(e["ip"], e["lport"])], e


def test_human_output_has_figure_3_columns(listeners):
    out = human_output("tcpconnlat", "-t", "0.3", "2")
    header = re.split(r"\s{2,}", out.splitlines()[1].strip())
    assert header == ["Time (s)", "PID", "Command", "IP", "Source", "Local port", "Destination", "Port", "Latency (ms)",
                      "Status"]
