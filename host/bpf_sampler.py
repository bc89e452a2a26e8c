"""The overhead panel's sampler: host/overhead_reader.py's reader, once a second on its own thread, its
rows handed to the GUI through a Qt signal."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from host.helper_stats import HelperStats
from host.overhead_reader import OverheadReader, SamplingThread, Targets


class OverheadSampler(QObject):
    """Samples once a second on its own thread; `sampled` carries the rows and a one-line summary.

    The GUI calls set_targets({metric: (pid or None, prog ids)}) from its own timer: pids come from each
    metric's meta record, ids from the controller."""

    sampled = Signal(object, str)             # rows (list of dicts, handed over as is), summary line

    def __init__(self, period: float = 1.0, elevate: list[str] | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.reader = OverheadReader(elevate)
        self.sampling = SamplingThread(self.reader, self.sampled.emit, period)

    @property
    def helper(self) -> HelperStats | None:
        return self.reader.helper

    @property
    def stats_state(self) -> str:
        """How bpf_stats is on, when the privilege helper holds it (an app that is not root); else ""."""
        return self.reader.stats_state

    def set_targets(self, targets: Targets) -> None:
        self.reader.set_targets(targets)

    def start(self) -> None:
        self.sampling.start()

    def stop(self) -> None:
        self.sampling.stop()
        self.reader.close()

    def sample(self) -> tuple[list[dict], str]:
        """One sample of every target (also callable directly, e.g. from tests)."""
        return self.reader.sample()
