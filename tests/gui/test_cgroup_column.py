"""The window's tables show a Cgroup column for every metric whose records carry one, and the filter box
over the table keeps the rows of one cgroup (a path typed in part)."""

import pytest
from PySide6.QtCore import Qt

import config
from gui.metric_tab import MetricTab

CARRYING = [s for s in config.METRICS if any(f.name == "cgroup" for f in s.fields)]


def test_the_metrics_that_carry_a_cgroup_declare_its_column():
    assert {s.name for s in CARRYING} >= {"sysnest", "pagefault", "cpuschedrun", "cacheraw", "biopwise",
                                          "tcpconnlat", "compmem"}


@pytest.mark.parametrize("spec", [config.get("sysnest"), config.get("pagefault")], ids=lambda s: s.name)
def test_filter_box_keeps_one_cgroup(qtbot, spec):
    tab = MetricTab(spec)
    qtbot.addWidget(tab)
    rows = [{"metric": spec.name, "ts": 1.0, "kind": "row", "interval": 1, "level": "detail", "pid": pid,
             "comm": "worker", "syscall": "getppid", "count": 10, "minor": 5, "major": 0,
             "cgroup_id": cgid, "cgroup": path}
            for pid, cgid, path in ((100, 7, "/lab/job-a"), (101, 8, "/lab/job-b"), (102, 9, "/system.slice/x.service"))]
    tab.feed([{"metric": spec.name, "ts": 0.5, "kind": "meta", "interval": 0}, *rows])
    tab.refresh()
    headers = [tab.model.headerData(i, Qt.Orientation.Horizontal) for i in range(tab.model.columnCount())]
    assert "Cgroup" in headers
    column = headers.index("Cgroup")
    tab.filter_box.setText("job-a")
    shown = [tab.proxy.data(tab.proxy.index(row, column)) for row in range(tab.proxy.rowCount())]
    assert shown == ["/lab/job-a"]
    tab.filter_box.setText("/lab/")
    assert tab.proxy.rowCount() == 2
