#!/usr/bin/env python3
"""The profiler's entry point and the window's behaviour: `python main_app.py` opens the window,
`--doctor` checks the machine.

The window (layout in ui_main_window.py) lists the registered metrics, builds each one's argument form
from config.py, starts every checked metric through the MonitorController (monitor/controller.py: one
worker per metric, the transport to the collector) and shows a tab per metric with a live chart and
table (gui/), and three panels (gui/panels.py): the transport's state, a bounded log and what the BPF
programs cost (host/bpf_stats.py). Records are queued as they arrive and applied by one 5 Hz timer, in
steps of a few milliseconds per event-loop turn, so a busy metric never floods the event loop; nothing
here does network or subprocess I/O on the GUI thread.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QBrush, QCloseEvent, QColor
from PySide6.QtWidgets import QApplication, QCheckBox, QMainWindow, QTreeWidgetItem

import config
from client.transport import collector_url
from gui.command_panel import CommandPanel
from gui.forms import ArgForm
from gui.metric_tab import MetricTab
from gui.panels import LogPanel, OverheadPanel, TransportPanel
from gui.session_panel import SessionPanel
from gui.style import INVALID_STYLE, STATE_COLOURS, TEXT
from gui.time_link import TimeLink
from host import heap_trim, preflight
from host.bpf_sampler import OverheadSampler
from host.bpf_stats import BpfStatsSwitch
from host.elevation import elevation_works, with_elevation
from ui_main_window import Ui_MainWindow


class _Tabs(dict):
    """metric -> MetricTab. After a start the tabs are built one per turn of the event loop
    (MainWindow.start_metrics); a tab still waiting is built at once when asked for by name."""

    def __init__(self, build: Callable[[str], MetricTab]) -> None:
        super().__init__()
        self._build = build

    def __missing__(self, name: str) -> MetricTab:
        return self._build(name)


class MainWindow(QMainWindow):
    REFRESH_MS = 200          # tables, charts and the log: 5 Hz at most, whatever the record rate
    SLICE_S = 0.008           # a refresh runs its steps in event-loop turns of about this long
    OVERHEAD_MS = 1000

    def __init__(self, controller: Any, verdicts: list[preflight.Verdict] | None = None,
                 settings: QSettings | None = None, server_url: str | None = None, token: str | None = None,
                 sampler: OverheadSampler | None = None, stats_switch: BpfStatsSwitch | None = None,
                 registry: list[config.MetricSpec] | None = None) -> None:
        super().__init__()
        self.ui = Ui_MainWindow()
        self.ui.setupUi(self)
        self.controller = controller
        self.settings = settings if settings is not None else app_settings()
        self.verdicts = {v.name: v for v in (verdicts or [])}
        self.specs = {spec.name: spec for spec in (config.METRICS if registry is None else registry)}
        self.forms: dict[str, ArgForm] = {}
        self.items: dict[str, QTreeWidgetItem] = {}
        self.tabs = _Tabs(self._pending_tab)     # metric -> its tab; a started one's is built when asked for
        self.drilled: int | None = None          # the process every tab shows (drill-down), if any
        self.time_link = TimeLink()              # zooming one chart over time zooms them all, in every tab
        self.link_box = QCheckBox("Link time axes", self)
        self.link_box.setChecked(True)
        self.link_box.setToolTip("zoom, pan and Reset zoom on one chart over time act on every chart over time")
        self.link_box.toggled.connect(self.time_link.set_enabled)
        self.statusBar().addPermanentWidget(self.link_box)
        self.running: set[str] = set()
        self._tab_counter = itertools.count()
        self._tab_order: dict[str, int] = {}     # a tab's place among the tabs: when its metric was started
        self._tabs_to_build: dict[str, tuple[str, str]] = {}   # started, no tab yet: its state, in start order
        self._closed = False
        self.transport_panel = TransportPanel(self.ui.transport_labels)
        self.log_panel = LogPanel(self.ui.log_view)
        self.overhead = OverheadPanel(self.ui.overhead_table, self.ui.overhead_status, self, sampler, stats_switch,
                                      self.ui.overhead_chart_host)
        self.stats_switch, self.sampler, self.overhead_model = (self.overhead.stats_switch, self.overhead.sampler,
                                                                self.overhead.model)

        self._build_metric_list()
        self._load_settings(server_url, token)
        self._connect()
        self.command = CommandPanel(self, self.ui.command_line, self.ui.run_command_button, self.ui.command_status)
        self.session = SessionPanel(self, self.ui.open_session_button, self.ui.record_button)
        self._steps: deque[Callable[[], object]] = deque()     # the refresh's steps not run yet
        self.refresh_timer = QTimer(self)
        self.refresh_timer.setInterval(self.REFRESH_MS)
        self.refresh_timer.timeout.connect(self._refresh_tick)
        self.refresh_timer.start()
        self.overhead_timer = QTimer(self)
        self.overhead_timer.setInterval(self.OVERHEAD_MS)
        self.overhead_timer.timeout.connect(self._update_overhead_targets)
        self.overhead_timer.start()
        self.sampler.start()
        freeze_startup_objects()

    # --- setup ------------------------------------------------------------------------------------
    def _build_metric_list(self) -> None:
        for spec in self.specs.values():
            verdict = self.verdicts.get(spec.name)
            item = QTreeWidgetItem(self.ui.metric_list, [spec.name, "", spec.description])
            item.setData(0, Qt.ItemDataRole.UserRole, spec.name)
            item.setCheckState(0, Qt.CheckState.Unchecked)
            if verdict is not None and not verdict.runnable:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsUserCheckable)
                for column in range(3):
                    item.setToolTip(column, f"cannot run here: {verdict.reason}")
                self._set_item_state(spec.name, "unavailable", verdict.reason, item)
            else:
                item.setToolTip(0, spec.description)
                item.setToolTip(2, spec.description)
            self.items[spec.name] = item
            form = ArgForm(spec, self.settings, self.ui.arg_stack)
            self.forms[spec.name] = form
            self.ui.arg_stack.addWidget(form)
        # the list as tall as its rows (up to a dozen), so the form below gets the rest
        rows = min(len(self.items), 12)
        row_height = self.ui.metric_list.sizeHintForRow(0) if self.items else 20
        self.ui.metric_list.setFixedHeight(rows * row_height + self.ui.metric_list.header().sizeHint().height() + 6)
        first = next((i for i in self.items.values() if i.flags() & Qt.ItemFlag.ItemIsEnabled), None)
        if first is not None:
            self.ui.metric_list.setCurrentItem(first)
            self._show_form(first.data(0, Qt.ItemDataRole.UserRole))

    def _connect(self) -> None:
        ui, c = self.ui, self.controller
        ui.metric_list.currentItemChanged.connect(
            lambda item, _prev: item is not None and self._show_form(item.data(0, Qt.ItemDataRole.UserRole)))
        ui.start_button.clicked.connect(self.start_checked)
        ui.stop_all_button.clicked.connect(self.stop_all)
        ui.reset_args_button.clicked.connect(self._reset_current_form)
        ui.apply_server_button.clicked.connect(self.apply_server)
        ui.server_url.returnPressed.connect(self.apply_server)
        ui.metric_tabs.tabCloseRequested.connect(self._close_tab)
        ui.metric_tabs.currentChanged.connect(self._tab_shown)
        c.records.connect(self._on_records)
        c.log.connect(self._on_log)
        c.metric_started.connect(self._on_started)
        c.metric_finished.connect(self._on_finished)
        c.transport_status.connect(self.transport_panel.show)

    def _load_settings(self, server_url: str | None, token: str | None) -> None:
        s = self.settings
        self.ui.server_url.setText(server_url if server_url is not None else str(s.value("transport/url", "") or ""))
        self.ui.server_token.setText(token if token is not None else str(s.value("transport/token", "") or ""))
        checked = s.value("metrics/checked", []) or []
        checked = [checked] if isinstance(checked, str) else list(checked)
        for name in checked:
            item = self.items.get(name)
            if item is not None and item.flags() & Qt.ItemFlag.ItemIsUserCheckable:
                item.setCheckState(0, Qt.CheckState.Checked)
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("transport/url", self.ui.server_url.text().strip())
        s.setValue("transport/token", self.ui.server_token.text())
        s.setValue("metrics/checked", self.checked())
        s.setValue("window/geometry", self.saveGeometry())
        for form in self.forms.values():
            form.save()
        private_settings(s)

    # --- the metric list and forms ------------------------------------------------------------------
    def checked(self) -> list[str]:
        """Checked metrics that can run here (a disabled item never counts, whatever its box says)."""
        return [name for name, item in self.items.items() if item.checkState(0) == Qt.CheckState.Checked
                and item.flags() & Qt.ItemFlag.ItemIsEnabled]

    def set_checked(self, names: list[str]) -> None:
        for name, item in self.items.items():
            item.setCheckState(0, Qt.CheckState.Checked if name in names else Qt.CheckState.Unchecked)

    def select_metric(self, name: str) -> None:
        self.ui.metric_list.setCurrentItem(self.items[name])
        self._show_form(name)

    def _show_form(self, name: str) -> None:
        form = self.forms.get(name)
        if form is None:
            return
        self.ui.arg_stack.setCurrentWidget(form)
        self.ui.args_box.setTitle(f"Arguments — {name}")
        self.ui.arg_description.setText(self.specs[name].description)

    def _reset_current_form(self) -> None:
        form = self.ui.arg_stack.currentWidget()
        if isinstance(form, ArgForm):
            form.reset()
            form.validate()

    def _set_item_state(self, name: str, state: str, tip: str = "", item: QTreeWidgetItem | None = None) -> None:
        item = item or self.items.get(name)
        if item is None:
            return
        item.setText(1, "" if state == "stopped" else state)
        item.setForeground(1, QBrush(QColor(STATE_COLOURS.get(state, TEXT))))
        item.setToolTip(1, tip or state)

    # --- start and stop -------------------------------------------------------------------------------
    def start_checked(self) -> list[str]:
        """Start every checked metric that is not running; nothing starts while any form is invalid.
        Returns the names handed to the controller."""
        names = [n for n in self.checked() if n not in self.running]
        if not names:
            self.statusBar().showMessage("Nothing to start: check a metric that is not running.", 5000)
            return []
        prepared, invalid = {}, []
        for name in names:
            values, errors = self.forms[name].validate()
            if errors:
                invalid.append(name)
            else:
                prepared[name] = values
        if invalid:
            self.select_metric(invalid[0])
            self.statusBar().showMessage(f"Not started: fix the marked arguments of {', '.join(invalid)}.", 10000)
            return []
        self.save_settings()
        self.overhead.stats_on()
        started = self.start_metrics(prepared)
        self.show_tabs(started)
        return started

    def show_tabs(self, names: list[str]) -> None:
        """The tabs in front, the first of `names` shown."""
        if names:
            self.ui.right_stack.setCurrentWidget(self.ui.metric_tabs)
            self.ui.metric_tabs.setCurrentWidget(self.tabs[names[0]])

    def start_metric(self, name: str, values: dict) -> bool:
        return self.start_metrics({name: values}) == [name]

    def start_metrics(self, prepared: dict[str, dict]) -> list[str]:
        """Start each metric with its form's values; returns those handed to the controller. Every
        subprocess is on its way before any tab is built: a tab's charts take ~30 ms of this thread,
        which, tab by tab before each start, put the tenth metric's start 1.3 s after the click."""
        for name in prepared:
            if name in self.tabs:
                self.tabs[name].reset()     # an earlier run's data, gone before this run's first record
        refused = {}
        for name, values in prepared.items():
            if name not in self.tabs:
                self._tab_order[name] = next(self._tab_counter)
            self._tabs_to_build[name] = ("starting", "")
            try:
                self.controller.start_metric(name, values)
            except Exception as exc:  # noqa: BLE001 - ValueError for bad values; anything else is shown, not raised
                refused[name] = message = str(exc) or type(exc).__name__
                self._tabs_to_build[name] = ("failed", f"not started: {message}")
                self.forms[name].show_message(f"not started: {message}")
                self._set_item_state(name, "failed", message)
                self._log("", f"{name}: not started: {message}")
                continue
            if name not in self.running:    # a controller may report the start at once (_on_started)
                self.running.add(name)
                self._set_item_state(name, "starting")
                self._log("", f"{name}: starting")
        # the first tab now (it is shown), the others one per turn of the event loop: ten tabs' charts
        # took this thread 2.5 s while ten compilers held both CPUs, a window that neither painted nor
        # answered meanwhile. A tab's state waits in _tabs_to_build; its first record builds it at once
        started = [name for name in prepared if name not in refused]
        self._build_tab(started[0] if started else next(iter(prepared)))
        self._build_next_tab()
        if refused:
            self._stats_off_if_idle()
        return started

    def _build_next_tab(self) -> None:
        """One pending tab a turn of the event loop, on a timer (not a posted event, which would run
        before the window's own paint timer every turn)."""
        if self._tabs_to_build:
            QTimer.singleShot(1, self, self._build_one_tab)

    def _build_one_tab(self) -> None:
        if self._tabs_to_build:
            self._build_tab(next(iter(self._tabs_to_build)))
        self._build_next_tab()

    def build_pending_tabs(self) -> None:
        """Every started metric's tab, now (tests)."""
        while self._tabs_to_build:
            self._build_tab(next(iter(self._tabs_to_build)))

    def _pending_tab(self, name: str) -> MetricTab:
        if name not in self._tabs_to_build:
            raise KeyError(name)
        return self._build_tab(name)

    def _build_tab(self, name: str) -> MetricTab:
        """A started (or refused) metric's tab, in the state it reached before it was built."""
        state = self._tabs_to_build.pop(name, None)
        tab = self._tab(name)
        if state is not None:
            tab.set_state(*state)
        return tab

    def show_process(self, pid: int | None) -> None:
        """Drill-down: every metric's table shows this process only (None: everything again)."""
        self.drilled = pid
        for tab in self.tabs.values():
            tab.show_process(pid)
        self.statusBar().showMessage(f"Every tab shows process {pid} only." if pid else "Every tab shows all rows.", 5000)

    def retry_metric(self, name: str) -> bool:
        """Start a failed metric again with its form's values (refused beside the fields if invalid)."""
        if name in self.running:
            return False
        values, errors = self.forms[name].validate()
        if errors:
            self.select_metric(name)
            return False
        return self.start_metric(name, values)

    def stop_metric(self, name: str) -> None:
        if name in self.running:
            self._set_state(name, "stopping")
            self.controller.stop_metric(name)

    def stop_all(self) -> None:
        for name in list(self.running):
            self._set_state(name, "stopping")
        self.controller.stop_all()

    def _tab(self, name: str) -> MetricTab:
        tab = self.tabs.get(name)
        if tab is None:
            tab = MetricTab(self.specs[name], parent=self.ui.metric_tabs, time_link=self.time_link)
            tab.stop_requested.connect(self.stop_metric)
            tab.retry_requested.connect(self.retry_metric)
            tab.drill_requested.connect(self.show_process)
            tab.show_process(self.drilled)
            # in the order the metrics were started, also when a record builds a later one's tab first
            order = self._tab_order.setdefault(name, next(self._tab_counter))
            at = sum(self._tab_order.get(other, -1) < order for other in self.tabs)
            self.tabs[name] = tab
            self.ui.metric_tabs.insertTab(at, tab, name)
        return tab

    def _tab_shown(self, index: int) -> None:
        tab = self.ui.metric_tabs.widget(index)
        if isinstance(tab, MetricTab):
            self.select_metric(tab.name)        # its arguments beside its data
            self.finish_refresh()               # the queued records first, in their order
            tab.refresh()

    def _close_tab(self, index: int) -> None:
        tab = self.ui.metric_tabs.widget(index)
        if not isinstance(tab, MetricTab):
            return
        self.stop_metric(tab.name)
        self.ui.metric_tabs.removeTab(index)
        self.tabs.pop(tab.name, None)
        self.time_link.leave(tab.time_charts())
        tab.reset()                         # its refresh steps still queued do nothing
        tab.deleteLater()
        if not self.tabs:
            self.ui.right_stack.setCurrentIndex(0)

    def _set_state(self, name: str, state: str, message: str = "") -> None:
        if name in self.tabs:
            self.tabs[name].set_state(state, message)
        elif name in self._tabs_to_build:
            self._tabs_to_build[name] = (state, message)
        self._set_item_state(name, state, message)

    # --- controller signals ---------------------------------------------------------------------------
    def _on_records(self, name: str, records: list) -> None:
        self.session.record(records)
        tab = self.tabs.get(name)
        if tab is None and name in self._tabs_to_build:
            tab = self._build_tab(name)     # its first record before its turn
        if tab is not None:
            tab.feed(records)

    def _on_log(self, name: str, line: str) -> None:
        self._log(name, line)

    def _on_started(self, name: str) -> None:
        self.running.add(name)
        self._set_state(name, "running")
        if name in self.forms:
            self.forms[name].show_message("")
        self._log("", f"{name}: running")

    def _on_finished(self, name: str, status: int, error: str) -> None:
        self.running.discard(name)
        if error:
            # the reason once: in the tab (and beside the argument it names); the log says where to look
            self._set_state(name, "failed", f"exit status {status}: {error}")
            self._log("", f"{name}: FAILED (exit status {status}); the reason is in its tab")
            self.forms[name].mark_named_argument(error)
        else:
            self._set_state(name, "stopped")
            self._log("", f"{name}: stopped (exit status {status})")
        self._stats_off_if_idle()

    def apply_server(self) -> None:
        url, token = self.ui.server_url.text().strip() or None, self.ui.server_token.text() or None
        if url:
            try:
                url = collector_url(url)   # '127.0.0.1:5055' gets its http://
            except ValueError as exc:
                self.ui.server_url.setStyleSheet(INVALID_STYLE)
                self.ui.server_url.setToolTip(str(exc))
                self._log("", f"collector: {exc}")
                return
            self.ui.server_url.setText(url)
        self.ui.server_url.setStyleSheet("")
        self.ui.server_url.setToolTip("")
        self.controller.set_server(url, token)
        self.save_settings()
        self._log("", f"collector: {url or 'none (records stay local)'}")

    # --- periodic work: one timer applies everything that queued up --------------------------------
    def refresh(self) -> None:
        """Apply everything that queued up, now."""
        self._queue_steps()
        self.finish_refresh()

    def _refresh_tick(self) -> None:
        """The timer's refresh: the tabs' steps run a few milliseconds' worth per event-loop turn, so
        input, paints and timers get their turn in between; a tick that finds the last refresh
        unfinished leaves the records in the tabs' queues for the next."""
        if not self._steps:
            self._queue_steps()
            self._run_steps()

    def _queue_steps(self) -> None:
        self._steps.extend(step for tab in self.tabs.values() for step in tab.refresh_steps())
        self._steps.append(self._refresh_panels)

    def _run_steps(self) -> None:
        deadline = time.perf_counter() + self.SLICE_S
        while self._steps:
            self._steps.popleft()()
            if time.perf_counter() >= deadline:
                break
        if self._steps:
            QTimer.singleShot(0, self, self._run_steps)

    def finish_refresh(self) -> None:
        """Run what a refresh left queued, now (before a tab is shown, or for refresh())."""
        while self._steps:
            self._steps.popleft()()

    def _refresh_panels(self) -> None:
        self.log_panel.flush()
        running = len(self.running)
        if running and not self.statusBar().currentMessage().startswith("Not started"):
            self.statusBar().showMessage(f"{running} metric{'s' if running > 1 else ''} running")

    @property
    def transport_status(self) -> dict:
        return self.transport_panel.status

    def _log(self, name: str, line: str) -> None:
        self.log_panel.add(name, line)

    # --- overhead ---------------------------------------------------------------------------------------
    def _update_overhead_targets(self) -> None:
        try:
            ids = self.controller.bpf_program_ids() or {}
        except Exception:  # noqa: BLE001 - the panel must never take the window down
            ids = {}
        targets = {}
        for name in set(self.running) | set(ids):
            tab = self.tabs.get(name)
            targets[name] = (tab.pid if tab else None, set(ids.get(name, ())))
        self.overhead.set_targets(targets)

    def _stats_off_if_idle(self) -> None:
        if not self.running:
            self.overhead.stats_off()

    # --- closing ----------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Stop every metric, flush the transport, put bpf_stats back; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.save_settings()
        self.statusBar().showMessage("Stopping every metric and flushing to the collector…")
        self.refresh_timer.stop()
        self.overhead_timer.stop()
        try:
            self.command.shutdown()       # a running command killed, its group removed (by its thread)
            self.controller.shutdown()
        finally:
            self.session.stop_recording(wait=5.0)
            self.sampler.stop()
            self.stats_switch.restore()



# --- entry point ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="main_app.py", description="eBPF performance profiler")
    parser.add_argument("--doctor", action="store_true", help="check this machine and every metric, then exit")
    parser.add_argument("--server", metavar="URL", help="collector base URL, e.g. http://127.0.0.1:5000 "
                        "(default: the last one used, else none: records stay local)")
    parser.add_argument("--token", metavar="TOKEN", help="bearer token for the collector")
    parser.add_argument("--open", metavar="FILE", help="open a recorded session (--headless --record FILE, or the "
                        "window's Record button): no root, BPF or collector needed")
    parser.add_argument("--headless", action="store_true",
                        help="run metrics without a window (monitor/headless.py; see --headless --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    heap_trim.start()  # window or headless: RSS stays flat over a long run (host/heap_trim.py says why)
    if "--headless" in argv:        # its own options (--metric, --arg, --duration ...) live in monitor/headless.py
        from monitor import headless

        return headless.main([a for a in argv if a != "--headless"])
    args = build_parser().parse_args(argv)
    if args.doctor:
        return preflight.main()
    return run_window(args)


def run_window(args: argparse.Namespace) -> int:
    """The desktop app; returns when the window closes (every metric stopped, transport flushed)."""
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController  # the pipeline (worker, transport) loads only for the window

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("eBPF profiler")
    verdicts = with_elevation(preflight.metric_verdicts(), elevation_works())   # before the window shows
    settings = app_settings()
    url = args.server if args.server is not None else settings.value("transport/url", "") or None
    token = args.token if args.token is not None else settings.value("transport/token", "") or None
    controller = MonitorController(server_url=url, token=token, relay=GuiThreadRelay())
    window = MainWindow(controller, verdicts=verdicts, settings=settings, server_url=url, token=token)
    # Ctrl-C or SIGTERM closes the window the normal way (metrics stopped, transport flushed); the
    # window's 5 Hz timer gives Python the chance to run the handler while Qt's loop waits.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: window.close())
    window.show()
    if args.open:
        window.session.open(args.open)
    return app.exec()


def freeze_startup_objects() -> None:
    """Python's full garbage collection walks every tracked object holding the GIL, in whichever thread
    triggers it: with the window's Qt, pyqtgraph and numpy objects that took 40-80 ms while records
    flowed, a stall of the GUI thread however little it had to do. What exists once the window is built
    lives as long as the app, so it goes to the permanent generation, which collections skip."""
    gc.collect()
    gc.freeze()


def private_settings(settings: QSettings) -> None:
    """Write the settings readable by their owner only: they hold the collector token."""
    previous = os.umask(0o077)  # the file Qt writes (a new one, renamed over the old) is born 0600
    try:
        settings.sync()
    finally:
        os.umask(previous)
    if settings.fileName() and os.path.exists(settings.fileName()):
        os.chmod(settings.fileName(), 0o600)  # one saved by an earlier version


def app_settings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "ebpf-profiler", "profiler")


if __name__ == "__main__":
    sys.exit(main())
