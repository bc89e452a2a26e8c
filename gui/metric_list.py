"""The left side's list of registered metrics — check to run, each one's state and cost beside it — and
the argument form of the one selected (gui/forms.py). A metric the preflight says cannot run here is
greyed out with the reason, and never counts as checked. Its cost is what it takes of the machine's CPU
now while it runs (the overhead sampler's figure), else what the recorded benchmarks measured
(gui/recorded_cost.py), greyed."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QGroupBox, QLabel, QPushButton, QStackedWidget, QTreeWidget, QTreeWidgetItem

import config
from gui.forms import ArgForm
from gui.recorded_cost import recorded_costs
from gui.style import QUIET, STATE_COLOURS, TEXT
from host import preflight

COLUMNS, COST, DESCRIPTION = 4, 2, 3       # the columns: Metric, State, Cost, Description


class MetricList:
    def __init__(self, tree: QTreeWidget, form_stack: QStackedWidget, form_box: QGroupBox, description: QLabel,
                 reset_button: QPushButton, specs: dict[str, config.MetricSpec],
                 verdicts: dict[str, preflight.Verdict], settings: QSettings) -> None:
        self.tree, self.form_stack, self.form_box, self.description = tree, form_stack, form_box, description
        self.specs = specs
        self.items: dict[str, QTreeWidgetItem] = {}
        self.forms: dict[str, ArgForm] = {}
        self.recorded = recorded_costs()
        for spec in specs.values():
            self._add(spec, verdicts.get(spec.name), settings)
        # the list as tall as its rows (up to a dozen), so the form below gets the rest
        rows = min(len(self.items), 12)
        row_height = tree.sizeHintForRow(0) if self.items else 20
        tree.setFixedHeight(rows * row_height + tree.header().sizeHint().height() + 6)
        first = next((i for i in self.items.values() if i.flags() & Qt.ItemFlag.ItemIsEnabled), None)
        if first is not None:
            tree.setCurrentItem(first)
            self.show_form(first.data(0, Qt.ItemDataRole.UserRole))
        tree.currentItemChanged.connect(
            lambda item, _prev: item is not None and self.show_form(item.data(0, Qt.ItemDataRole.UserRole)))
        reset_button.clicked.connect(self.reset_current_form)

    def _add(self, spec: config.MetricSpec, verdict: preflight.Verdict | None, settings: QSettings) -> None:
        item = QTreeWidgetItem(self.tree, [spec.name, "", "", spec.description])
        item.setData(0, Qt.ItemDataRole.UserRole, spec.name)
        item.setCheckState(0, Qt.CheckState.Unchecked)
        self.items[spec.name] = item
        self.show_recorded_cost(spec.name)
        if verdict is not None and not verdict.runnable:
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsUserCheckable)
            for column in range(COLUMNS):
                item.setToolTip(column, f"cannot run here: {verdict.reason}")
            self.set_state(spec.name, "unavailable", verdict.reason, item)
        else:
            item.setToolTip(0, spec.description)
            item.setToolTip(DESCRIPTION, spec.description)
        form = ArgForm(spec, settings, self.form_stack)
        self.forms[spec.name] = form
        self.form_stack.addWidget(form)

    def checked(self) -> list[str]:
        """Checked metrics that can run here (a disabled item never counts, whatever its box says)."""
        return [name for name, item in self.items.items() if item.checkState(0) == Qt.CheckState.Checked
                and item.flags() & Qt.ItemFlag.ItemIsEnabled]

    def set_checked(self, names: list[str]) -> None:
        for name, item in self.items.items():
            item.setCheckState(0, Qt.CheckState.Checked if name in names else Qt.CheckState.Unchecked)

    def check_saved(self, names: list[str]) -> None:
        """The metrics checked when the window last saved, those that can run here."""
        for name in names:
            item = self.items.get(name)
            if item is not None and item.flags() & Qt.ItemFlag.ItemIsUserCheckable:
                item.setCheckState(0, Qt.CheckState.Checked)

    def select(self, name: str) -> None:
        self.tree.setCurrentItem(self.items[name])
        self.show_form(name)

    def show_form(self, name: str) -> None:
        form = self.forms.get(name)
        if form is None:
            return
        self.form_stack.setCurrentWidget(form)
        self.form_box.setTitle(f"Arguments — {name}")
        self.description.setText(self.specs[name].description)

    def reset_current_form(self) -> None:
        form = self.form_stack.currentWidget()
        if isinstance(form, ArgForm):
            form.reset()
            form.validate()

    def set_state(self, name: str, state: str, tip: str = "", item: QTreeWidgetItem | None = None) -> None:
        item = item or self.items.get(name)
        if item is None:
            return
        item.setText(1, "" if state == "stopped" else state)
        item.setForeground(1, QBrush(QColor(STATE_COLOURS.get(state, TEXT))))
        item.setToolTip(1, tip or state)

    def show_costs(self, costs: dict[str, float | None], running: set[str], cpus: int) -> None:
        """Each running metric's measured share of the machine's CPU (its BPF programs and its process,
        the overhead sampler's last figure); the others' recorded figure."""
        for name in self.items:
            cost = costs.get(name) if name in running else None
            if cost is None:
                self.show_recorded_cost(name)
                continue
            item = self.items[name]
            item.setText(COST, f"{cost:.2f} %")
            item.setForeground(COST, QBrush(QColor(TEXT)))
            item.setToolTip(COST, f"now: {cost:.2f} % of the machine's CPU ({cpus} CPUs), its BPF programs' run time "
                                  "(bpf_stats) and its process's CPU over the last second")

    def show_recorded_cost(self, name: str) -> None:
        """The benchmarks' figure of `name`, greyed ("" when they recorded none)."""
        item, recorded = self.items[name], self.recorded.get(name)
        if not item.flags() & Qt.ItemFlag.ItemIsEnabled:
            return                      # the reason it cannot run stays the tooltip
        item.setText(COST, recorded.text if recorded else "")
        item.setForeground(COST, QBrush(QColor(QUIET)))
        item.setToolTip(COST, recorded.tip if recorded else "no recorded benchmark figure; measured while it runs")
