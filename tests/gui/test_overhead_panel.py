"""The overhead panel shows each metric's subtotal (its programs' kernel CPU, its process's CPU and PSS)
in bold after its programs, and the app's own row, with the units once."""

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QTableView, QWidget

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
    rows, summary = sampler.sample()
    panel.show_sample(rows, summary)
    model = table.model()
    headers = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert headers[-4:] == ["BPF CPU of one core (%)", "Process CPU (%)", "Total CPU (%)", "PSS"]
    assert [model.index(r, 0).data() for r in range(model.rowCount())] == ["self", "(this app)"]
    pss = model.index(0, headers.index("PSS")).data()
    assert pss.endswith("MiB") and abs(float(pss.split()[0]) - pss_bytes(os.getpid()) / 2**20) < 5
    assert all(model.index(r, 0).data(Qt.ItemDataRole.FontRole).bold() for r in range(2))
    assert status.text().startswith("bpf_stats: off  —  processes ")
