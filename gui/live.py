"""The base of every view a metric tab feeds: add_records() takes a batch and marks the view dirty;
redraw() draws, if it is dirty and visible. The owner calls redraw() from one timer (a few times a
second), so a metric printing thousands of records a second costs one redraw per tick, not one per record.
A paused view keeps taking records (within its bounded history) but does not draw until resumed.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QWidget

import config
from gui.models import newest


class LiveChart(QWidget):
    keep: int | None = None             # records that can still show; older ones need not be taken

    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None, chart: config.Chart | None = None) -> None:
        super().__init__(parent)
        self.spec = spec
        self.chart = chart or spec.chart
        self.dirty = False
        self.redraws = 0
        self.paused = False
        self.held = 0                   # records taken while paused, not drawn yet

    def set_pid(self, pid: int | None) -> None:
        """Drill-down: a chart whose records name their process shows that process's only; others all."""

    def set_paused(self, paused: bool) -> None:
        """Freeze the picture (records still arrive and are kept); on resume, draw what arrived."""
        self.paused = paused
        if not paused:
            self.held = 0
            self.redraw(force=True)

    def wants(self, record: dict) -> bool:
        return record.get("kind") == self.chart.record_kind

    def add_records(self, records: Sequence[dict]) -> None:
        for record in newest(records, self.wants, self.keep):
            self.take(record)
            self.dirty = True
            self.held += self.paused

    def take(self, record: dict) -> None:
        raise NotImplementedError

    def redraw(self, force: bool = False) -> bool:
        """Draw what arrived since the last redraw; False when there was nothing to do."""
        if self.paused or not self.dirty or not (force or self.isVisible()):
            return False
        self.dirty = False
        self.redraws += 1
        self.draw()
        return True

    def draw(self) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        self.dirty = True
