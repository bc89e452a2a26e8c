"""tcpconnlat by cgroup: connects made by workloads in two test-made cgroups and one outside each carry
their own group; --cgroup keeps one group and a group made below it after start."""

import socket
import threading

import pytest
from cgroup_fixtures import CONNECTS, traced_in_cgroups

pytestmark = pytest.mark.bpf

COUNTS = {"a": 30, "b": 20, "out": 10, "late": 15}


@pytest.fixture
def listener():
    """A local listener that accepts and closes every connection; its port."""
    server = socket.create_server(("127.0.0.1", 0), backlog=512)
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


def connects_of(tool, pid: int, port: int) -> list[dict]:
    return [e for e in tool.of_kind("event") if e["pid"] == pid and e["dport"] == port]


@pytest.mark.parametrize("filtered", [False, True])
def test_each_connect_in_its_own_cgroup(test_cgroups, listener, filtered):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "tcpconnlat", ["0.5"], CONNECTS, COUNTS,
                                                 filtered=filtered, extra=(str(listener),))
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name, child in kids.items():
        events = connects_of(tool, child.pid, listener)
        shown = not filtered or name in ("a", "late")
        assert len(events) == (truth[name]["connects"] if shown else 0), (name, len(events))
        if shown and name in ids:
            assert {e["cgroup_id"] for e in events} == {ids[name]}
            assert {e["cgroup"] for e in events} == {test_cgroups.rel(paths[name])}
        elif shown:
            assert not {e["cgroup_id"] for e in events} & set(ids.values())
    if filtered:
        assert {e["cgroup_id"] for e in tool.of_kind("event")} <= {ids["a"], ids["late"]}
