"""The overhead panel shows each metric's subtotal (its programs' kernel CPU, its process's CPU and PSS)
in bold after its programs, and the app's own row, with the units once."""

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QTableView, QVBoxLayout, QWidget

from gui.panels import OverheadPanel
from host.bpf_sampler import OverheadSampler
from host.proc_cost import pss_bytes


class NoSwitch:
    state = "off"


def test_subtotal_and_app_rows_show_process_cpu_and_pss(qtbot):
    parent = QWidget()
    qtbot.addWidget(parent)
    table, status = QTableView(parent), QLabel(parent)
    sampler = OverheadSampler(elevate=[])
    panel = OverheadPanel(table, status, parent, sampler=sampler, stats_switch=NoSwitch())
    sampler.set_targets({"self": (os.getpid(), set())})
    sampler.sample()
    # this process's PSS moves while the sampler reads it (a fork child's exit unshares its pages: 8.8 MiB
    # once in a quick suite beside a loaded run): the panel's figure lies between a read before and after
    before = pss_bytes(os.getpid()) / 2**20
    rows, summary = sampler.sample()
    after = pss_bytes(os.getpid()) / 2**20
    panel.show_sample(rows, summary)
    model = table.model()
    # the header's words, whatever lines they are on (two, where the column's numbers are narrow)
    headers = [model.headerData(c, Qt.Orientation.Horizontal).replace("\n", " ") for c in range(model.columnCount())]
    assert headers[-4:] == ["BPF CPU of one core (%)", "Process CPU (%)", "Total CPU (%)", "PSS"]
    assert [model.index(r, 0).data() for r in range(model.rowCount())] == ["self", "(this app)"]
    pss = model.index(0, headers.index("PSS")).data()
    assert pss.endswith("MiB") and min(before, after) - 0.1 <= float(pss.split()[0]) <= max(before, after) + 0.1, \
        (pss, before, after)
    assert all(model.index(r, 0).data(Qt.ItemDataRole.FontRole).bold() for r in range(2))
    assert status.text().startswith("bpf_stats: off  —  processes ")


def test_the_cost_over_time_adds_each_samples_parts(qtbot):
    parent = QWidget()
    qtbot.addWidget(parent)
    host = QWidget(parent)
    host.setLayout(QVBoxLayout())
    panel = OverheadPanel(QTableView(parent), QLabel(parent), parent, sampler=OverheadSampler(elevate=[]),
                          stats_switch=NoSwitch(), chart_host=host)
    parent.show()
    assert panel.chart.parent() is host and panel.chart.isVisible()
    samples = [
        [{"metric": "a", "id": 7, "type": "tracepoint", "cpu_pct": 0.5},
         {"metric": "a", "id": None, "type": "subtotal", "cpu_pct": 0.5, "proc_cpu_pct": 2.0},
         {"metric": "b", "id": None, "type": "subtotal", "cpu_pct": None, "proc_cpu_pct": 1.0},
         {"metric": "(this app)", "id": None, "type": "app", "cpu_pct": None, "proc_cpu_pct": 3.0}],
        [{"metric": "a", "id": None, "type": "subtotal", "cpu_pct": 1.5, "proc_cpu_pct": None},
         {"metric": "(this app)", "id": None, "type": "app", "cpu_pct": None, "proc_cpu_pct": 0.5}],
    ]
    for rows in samples:
        panel.show_sample(rows, "")
    ys = {key: list(line.getData()[1]) for key, line in panel.chart.lines.items()}
    assert ys == {"bpf": [0.5, 1.5], "processes": [6.0, 0.5], "total": [6.5, 2.0]}   # the program row not twice
