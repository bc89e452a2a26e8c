"""netpack against datagrams a child sent (known count and sizes), and against a qdisc's own drop
counter for queued packets that never reach the driver."""

import os
import subprocess
import sys

import pytest
from helpers import MetricProcess, end_workload, headings, report_of, run_workload, settle_and_stop

PAYLOADS = (100, 500, 1200)
N = 1000
# IPv4 (20) + UDP (8) + Ethernet (14): lo builds an Ethernet header, and net_dev_queue's len is skb->len
HEADERS = 42
UDP_CHILD = """
import json, socket, sys
n, payloads, addr = int(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")], sys.argv[3]
sys.stdin.readline()
loopback = addr == "127.0.0.1"
if loopback:                      # a local socket that reads what it is sent
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((addr, 0))
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = {}
for i in range(n):
    size = payloads[i % len(payloads)]
    tx.sendto(b"x" * size, rx.getsockname() if loopback else (addr, 9))
    sent[size] = sent.get(size, 0) + 1
    if loopback:
        rx.recv(2048)
print(json.dumps(sent), flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


def run_traced(tool_args: tuple, child_argv: tuple, netns: str | None = None) -> tuple[MetricProcess, dict]:
    """Start netpack, let a child send, read two more intervals, stop; (tool, what the child sent)."""
    if netns:
        child = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", UDP_CHILD, *child_argv],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    else:
        child = run_workload(UDP_CHILD, *child_argv)
    tool = MetricProcess("netpack", "0.5", *tool_args)
    try:
        tool.wait_meta()
        sent = {int(size): count for size, count in report_of(child).items()}
        settle_and_stop(tool, timeout=30)
    finally:
        tool.kill()
        end_workload(child)
    return tool, sent


def test_udp_datagrams_on_lo_lengths_and_latency():
    tool, sent = run_traced(("--dev", "lo", "--events"), (str(N), ",".join(map(str, PAYLOADS)), "127.0.0.1"))
    assert not tool.lost_in_the_tool(), tool.of_kind("lost")
    events = tool.of_kind("event")
    assert {e["dev"] for e in events} == {"lo"}
    for payload in PAYLOADS:
        mine = [e for e in events if e["len"] == payload + HEADERS]
        # other loopback traffic may add a few packets of the same length, never many
        assert sent[payload] * 0.99 <= len(mine) <= sent[payload] * 1.01, (payload, len(mine), sent[payload])
        assert all(e["latency_us"] > 0 for e in mine)
    rows = [r for r in tool.of_kind("row") if r["dev"] == "lo"]
    measured = sum(len([e for e in events if e["len"] == p + HEADERS]) for p in PAYLOADS)
    assert sum(r["packets"] for r in rows) >= measured          # summaries count every packet on lo
    assert sum(r["bytes"] for r in rows) >= sum(sent[p] * 0.99 * (p + HEADERS) for p in PAYLOADS)
    assert {r["dev"] for r in tool.of_kind("row")} == {"lo"}   # --dev lo
    busiest = max(rows, key=lambda r: r["packets"])
    assert 0 < busiest["p50_us"] <= busiest["p99_us"] <= busiest["max_us"]
    assert max(e["latency_us"] for e in events) <= max(r["max_us"] for r in rows) + 0.001


def test_min_us_filters_events_not_summaries():
    tool, sent = run_traced(("--dev", "lo", "--min-us", "100000"), ("300", "100", "127.0.0.1"))
    # a loopback datagram waits microseconds, never 100 ms: no event, but every one is in the summary
    assert not [e for e in tool.of_kind("event") if e["len"] == 100 + HEADERS]
    assert sum(r["packets"] for r in tool.of_kind("row")) >= 0.99 * sent[100]
    assert tool.of_kind("meta")[0]["events"] is True      # --min-us implies --events


@pytest.fixture
def dropping_netns():
    """A network namespace with a veth whose root qdisc (pfifo, limit 0) drops every packet: each one
    passes net_dev_queue and never reaches net_dev_xmit. The qdisc counts its drops itself."""
    name = f"netpack{os.getpid()}"

    def ip(*argv: str) -> str:
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout

    ip("ip", "netns", "add", name)
    try:
        # no IPv6 autoconfiguration chatter: the datagrams the test sends are the only packets
        ip("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
           "net.ipv6.conf.default.disable_ipv6=1")
        ip("ip", "-n", name, "link", "add", "npk0", "type", "veth", "peer", "name", "npk1")
        ip("ip", "-n", name, "addr", "add", "10.250.0.1/24", "dev", "npk0")
        # a static neighbour, so datagrams are queued to the device rather than held for ARP
        ip("ip", "-n", name, "neigh", "replace", "10.250.0.2", "lladdr", "02:00:00:00:00:02", "dev", "npk0",
           "nud", "permanent")
        ip("tc", "-n", name, "qdisc", "replace", "dev", "npk0", "root", "pfifo", "limit", "0")
        ip("ip", "-n", name, "link", "set", "npk1", "up")
        ip("ip", "-n", name, "link", "set", "npk0", "up")

        def dropped() -> int:
            stats = ip("tc", "-n", name, "-s", "qdisc", "show", "dev", "npk0")
            return int(stats.split("dropped", 1)[1].split(",")[0])

        yield name, dropped
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_packets_dropped_before_xmit_are_counted_unmatched(dropping_netns):
    netns, dropped = dropping_netns
    before = dropped()
    tool, sent = run_traced(("--dev", "npk0", "--expire", "0.3"), ("200", "100", "10.250.0.2"), netns=netns)
    drops = dropped() - before
    assert sum(sent.values()) == 200 and drops == 200
    unmatched = sum(s["unmatched"] for s in tool.of_kind("summary"))
    assert unmatched == drops, (unmatched, drops)             # every dropped packet, nothing else
    assert not [r for r in tool.of_kind("row") if r["packets"]]  # none reached the driver
    assert not tool.of_kind("event")                          # summaries only by default


def test_human_output_has_figure_4_lines():
    # a datagram every 20 ms for as long as the tool runs (its load time varies)
    child = subprocess.Popen([sys.executable, "-c", TRICKLE])
    tool = MetricProcess("netpack", "--dev", "lo", "--events", "0.5", "4", json_output=False)
    try:
        out, err = tool.proc.communicate(timeout=60)
    finally:
        tool.kill()
        child.kill()
        child.wait()
    assert tool.proc.returncode == 0, err
    assert f"len={100 + HEADERS:<7} latency=" in out
    assert headings(out, "Device") == ["Device", "Packets", "Bytes", "Avg (TIME)", "p50 (TIME)", "p99 (TIME)",
                                       "Max (TIME)"]
    assert any(line.startswith("lo ") for line in out.splitlines())


TRICKLE = """
import socket, time
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.bind(("127.0.0.1", 0))
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
while True:
    tx.sendto(b"x" * 100, rx.getsockname())
    rx.recv(2048)
    time.sleep(0.02)
"""
