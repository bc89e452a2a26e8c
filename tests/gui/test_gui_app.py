"""The window end to end, with the real controller and real BPF: two metrics started from their forms,
their tables show exactly what the collector received, the transport panel counts the batches the
collector stored, the overhead panel shows their programs running, and stopping leaves no process and
no BPF program."""

import os

import pytest
from collector_stub import CollectorStub
from gui_fakes import make_window
from helpers import progs_released

import config
from host import preflight

pytestmark = pytest.mark.bpf
PAIR = ["sysnest", "pagefault"] if "pagefault" in {s.name for s in config.METRICS} else ["sysnest", "cpuschedrun"]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def collector():
    stub = CollectorStub().start()
    yield stub
    stub.stop()


def test_two_metrics_from_the_window_to_the_collector_and_back_to_nothing(qtbot, tmp_path, collector):
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController

    controller = MonitorController(server_url=collector.url, state_dir=str(tmp_path / "state"), relay=GuiThreadRelay())
    window = make_window(qtbot, tmp_path, controller, show=True, verdicts=preflight.metric_verdicts(),
                         server_url=collector.url)
    for name in PAIR:
        window.forms[name].editors["interval"].setText("0.5")
    window.set_checked(PAIR)
    assert window.start_checked() == PAIR

    # records reach both tables
    qtbot.waitUntil(lambda: all(window.tabs[n].state == "running" for n in PAIR), timeout=90_000)
    qtbot.waitUntil(lambda: all(window.tabs[n].model.rowCount() > 0 and window.tabs[n].pid is not None for n in PAIR),
                    timeout=60_000)
    pids = {n: window.tabs[n].pid for n in PAIR}
    held = controller.bpf_program_ids()
    assert all(held.get(n) for n in PAIR), f"no BPF programs held: {held}"

    # what a table shows is what the collector stored for that interval
    for name in PAIR:
        model = window.tabs[name].model
        shown, interval = [dict(r) for r in model.rows], model.interval

        def stored(name: str = name, interval: int = interval) -> list[dict]:
            return [r for r in collector.records(name) if r["kind"] == "row" and r["interval"] == interval]

        wanted = len(shown)
        qtbot.waitUntil(lambda stored=stored, wanted=wanted: len(stored()) >= wanted, timeout=15_000)
        assert stored() == shown, f"{name}: table and collector differ for interval {interval}"

    # the overhead panel sees both metrics' programs run
    def overhead_ok():   # every program listed; each metric's programs ran (a major-fault one may not)
        rows = window.overhead_model.rows
        ran = {n: sum(r["run_cnt"] or 0 for r in rows if r["metric"] == n) for n in PAIR}
        return {r["id"] for r in rows} >= set().union(*held.values()) and all(ran.values())

    qtbot.waitUntil(overhead_ok, timeout=15_000)
    assert window.stats_switch.state.startswith("on")

    # stop: every process gone, every program released
    window.ui.stop_all_button.click()
    qtbot.waitUntil(lambda: all(window.tabs[n].state == "stopped" for n in PAIR), timeout=30_000)
    assert window.running == set() and controller.running() == []
    for name, pid in pids.items():
        assert not alive(pid), f"{name} (pid {pid}) still runs"
    assert progs_released(set().union(*held.values())), "BPF programs left loaded after stop"
    assert window.stats_switch.state == "off"

    # the transport panel counts what the collector received, once everything is delivered
    def panel_matches():
        status = window.transport_status
        return (status.get("buffered") == 0 and status.get("pending_outbox") == 0 and collector.batches
                and window.ui.transport_labels["sent"].text()
                == f"{len(collector.batches):,} batches, {len(collector.records()):,} records")

    qtbot.waitUntil(panel_matches, timeout=20_000)
    assert window.ui.transport_labels["reachable"].text() == "● reachable"
    assert window.ui.transport_labels["dropped"].text() == "0"
    assert sum(collector.posts.values()) == len(collector.batches), "a batch was posted twice"

    window.close()
    assert os.path.exists(tmp_path / "settings.ini")


def test_closing_the_window_stops_the_metrics_and_flushes_everything(qtbot, tmp_path, collector):
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController

    controller = MonitorController(server_url=collector.url, state_dir=str(tmp_path / "state"), relay=GuiThreadRelay())
    window = make_window(qtbot, tmp_path, controller, show=True, server_url=collector.url)
    window.forms["sysnest"].editors["interval"].setText("0.3")
    window.set_checked(["sysnest"])
    window.start_checked()
    tab = window.tabs["sysnest"]
    qtbot.waitUntil(lambda: tab.model.rowCount() > 0 and tab.pid is not None, timeout=90_000)
    held = controller.bpf_program_ids()["sysnest"]
    assert held

    window.close()                                  # while it runs

    assert not alive(tab.pid), "the metric outlived the window"
    assert progs_released(held), "BPF programs left loaded after the window closed"
    status = controller.transport.status()
    assert status["pending_outbox"] == 0 and status["buffered"] == 0, status
    # every record the window received was delivered before close() returned
    assert len(collector.records("sysnest")) == tab.records_seen > 0
    assert window.stats_switch.state == "off"
