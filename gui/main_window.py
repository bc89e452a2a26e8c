"""The window's behaviour (its layout is ui_main_window.py; main_app.py starts it). It lists the registered
metrics with each one's argument form (gui/metric_list.py), starts every checked metric through the
MonitorController (monitor/controller.py: one worker per metric, the transport to the collector), shows
a tab per metric with a live chart and table (gui/metric_tabs.py), and three panels (gui/panels.py): the
transport's state, a bounded log and what the BPF programs cost (host/bpf_stats.py), with the overhead
budget beside it (gui/budget_panel.py) and each metric's cost in the metric list. The "Run a command"
box and the sessions are panels of their own, which see the window only as a HostWindow
(gui/host_window.py). Records are queued as they arrive and applied by one 5 Hz timer, in steps of a
few milliseconds per event-loop turn, so a busy metric never floods the event loop; nothing here does
network or subprocess I/O on the GUI thread.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QCheckBox, QMainWindow

import config
from client.transport import base_url, collector_url
from gui.app_settings import app_settings, private_settings
from gui.budget_panel import BudgetPanel
from gui.command_panel import CommandPanel
from gui.connection_check import ConnectionCheck
from gui.metric_list import MetricList
from gui.metric_tab import MetricTab
from gui.metric_tabs import MetricTabs
from gui.panels import LogPanel, OverheadPanel, TransportPanel
from gui.profile_panel import ProfilePanel
from gui.session_panel import SessionPanel
from gui.style import INVALID_STYLE
from gui.time_link import TimeLink
from host import preflight
from host.bpf_sampler import OverheadSampler
from host.bpf_stats import BpfStatsSwitch
from monitor.controller import MonitorController
from ui_main_window import Ui_MainWindow


class MainWindow(QMainWindow):
    REFRESH_MS = 200          # tables, charts and the log: 5 Hz at most, whatever the record rate
    SLICE_S = 0.008           # a refresh runs its steps in event-loop turns of about this long
    OVERHEAD_MS = 1000

    def __init__(self, controller: MonitorController, verdicts: list[preflight.Verdict] | None = None,
                 settings: QSettings | None = None, server_url: str | None = None, token: str | None = None,
                 sampler: OverheadSampler | None = None, stats_switch: BpfStatsSwitch | None = None,
                 registry: list[config.MetricSpec] | None = None) -> None:
        super().__init__()
        self.ui = ui = Ui_MainWindow()
        ui.setupUi(self)
        self.controller = controller
        self.settings = settings if settings is not None else app_settings()
        self.specs = {spec.name: spec for spec in (config.METRICS if registry is None else registry)}
        self.metric_list = MetricList(ui.metric_list, ui.arg_stack, ui.args_box, ui.arg_description,
                                      ui.reset_args_button, self.specs, {v.name: v for v in (verdicts or [])},
                                      self.settings)
        self.forms, self.items = self.metric_list.forms, self.metric_list.items
        self.time_link = TimeLink()              # zooming one chart over time zooms them all, in every tab
        self.metric_tabs = MetricTabs(ui.metric_tabs, self.specs, self.time_link, self._connect_tab)
        self.tabs = self.metric_tabs.tabs        # metric -> its tab; a started one's is built when asked for
        self.link_box = QCheckBox("Link time axes", self)
        self.link_box.setChecked(True)
        self.link_box.setToolTip("zoom, pan and Reset zoom on one chart over time act on every chart over time")
        self.link_box.toggled.connect(self.time_link.set_enabled)
        self.statusBar().addPermanentWidget(self.link_box)
        self.running: set[str] = set()
        self.failed: dict[str, str] = {}         # metric -> why its last run failed, until it starts again
        self._activity = "No metric running."    # the status bar's last word on what runs (_show_activity)
        self._closed = False
        self.transport_panel = TransportPanel(ui.transport_labels)
        self.connection_check = ConnectionCheck(self)
        self.log_panel = LogPanel(ui.log_view)
        self.overhead = OverheadPanel(ui.overhead_table, ui.overhead_status, self, sampler, stats_switch,
                                      ui.overhead_chart_host)
        self.stats_switch, self.sampler, self.overhead_model = (self.overhead.stats_switch, self.overhead.sampler,
                                                                self.overhead.model)
        self.budget = BudgetPanel(ui.budget_edit, ui.budget_action, ui.budget_over_label, ui.budget_state,
                                  self.overhead.chart, controller, self.settings, self._budget_said)

        self._load_settings(server_url, token)
        self._connect()
        self.command = CommandPanel(self, ui.command_line, ui.run_command_button, ui.command_status)
        self.session = SessionPanel(self, ui.open_session_button, ui.record_button)
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
    def _connect(self) -> None:
        ui, c = self.ui, self.controller
        ui.start_button.clicked.connect(self.start_checked)
        ui.stop_all_button.clicked.connect(self.stop_all)
        ui.apply_server_button.clicked.connect(self.apply_server)
        ui.server_url.returnPressed.connect(self.apply_server)
        ui.test_server_button.clicked.connect(self.test_connection)
        self.connection_check.checked.connect(self._connection_checked)
        ui.metric_tabs.tabCloseRequested.connect(self.close_tab)
        ui.metric_tabs.currentChanged.connect(self._tab_shown)
        c.records.connect(self._on_records)
        c.log.connect(self._on_log)
        c.metric_started.connect(self._on_started)
        c.metric_finished.connect(self._on_finished)
        c.transport_status.connect(self.transport_panel.show)
        self.sampler.sampled.connect(self.overhead_sampled)

    def _connect_tab(self, tab: MetricTab) -> None:
        tab.stop_requested.connect(self.stop_metric)
        tab.retry_requested.connect(self.retry_metric)
        tab.drill_requested.connect(self.show_process)
        for chart in tab.charts:
            if isinstance(chart, ProfilePanel):        # "Baseline from collector…" starts from the collector set here
                chart.collector_settings = lambda: (self.ui.server_url.text().strip(), self.ui.server_token.text())

    def _load_settings(self, server_url: str | None, token: str | None) -> None:
        s = self.settings
        self.ui.server_url.setText(server_url if server_url is not None else str(s.value("transport/url", "") or ""))
        self.ui.server_token.setText(token if token is not None else str(s.value("transport/token", "") or ""))
        checked = s.value("metrics/checked", []) or []
        self.metric_list.check_saved([checked] if isinstance(checked, str) else list(checked))
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

    # --- the metric list ------------------------------------------------------------------------------
    def checked(self) -> list[str]:
        return self.metric_list.checked()

    def set_checked(self, names: list[str]) -> None:
        self.metric_list.set_checked(names)

    def select_metric(self, name: str) -> None:
        self.metric_list.select(name)

    # --- start and stop -------------------------------------------------------------------------------
    def start_checked(self) -> list[str]:
        """Start every checked metric that is not running; nothing starts while any form is invalid.
        Returns the names handed to the controller."""
        names = [n for n in self.checked() if n not in self.running]
        if not names:
            self.show_status("Nothing to start: check a metric that is not running.", 5000)
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
            self.show_status(f"Not started: fix the marked arguments of {', '.join(invalid)}.", 10000)
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
            self.metric_tabs.expect(name)
            try:
                self.controller.start_metric(name, values)
            except Exception as exc:  # noqa: BLE001 - ValueError for bad values; anything else is shown, not raised
                refused[name] = message = str(exc) or type(exc).__name__
                self.failed[name] = f"not started: {message}"
                self.metric_tabs.hold(name, "failed", f"not started: {message}")
                self.forms[name].show_message(f"not started: {message}")
                self.metric_list.set_state(name, "failed", message)
                self.log(f"{name}: not started: {message}")
                continue
            self.failed.pop(name, None)
            if name not in self.running:    # a controller may report the start at once (_on_started)
                self.running.add(name)
                self.metric_list.set_state(name, "starting")
                self.log(f"{name}: starting")
        # the first tab now (it is shown), the others one per turn of the event loop (gui/metric_tabs.py)
        started = [name for name in prepared if name not in refused]
        self.metric_tabs.build(started[0] if started else next(iter(prepared)))
        self.metric_tabs.build_later()
        if refused:
            self._stats_off_if_idle()
        return started

    def build_pending_tabs(self) -> None:
        """Every started metric's tab, now (tests)."""
        self.metric_tabs.build_waiting()

    def tab_for(self, name: str) -> MetricTab:
        return self.metric_tabs.tab_for(name)

    def show_process(self, pid: int | None) -> None:
        """Drill-down: every metric's table shows this process only (None: everything again)."""
        self.metric_tabs.show_process(pid)
        self.show_status(f"Every tab shows process {pid} only." if pid else "Every tab shows all rows.", 5000)

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

    def _tab_shown(self, index: int) -> None:
        tab = self.metric_tabs.tab_at(index)
        if tab is not None:
            self.select_metric(tab.name)        # its arguments beside its data
            self.finish_refresh()               # the queued records first, in their order
            tab.refresh()

    def close_tab(self, index: int) -> None:
        """The tab's close button: its metric stopped, the tab gone."""
        tab = self.metric_tabs.tab_at(index)
        if tab is None:
            return
        self.stop_metric(tab.name)
        self.metric_tabs.remove(tab)
        if not self.tabs:
            self.ui.right_stack.setCurrentIndex(0)

    def _set_state(self, name: str, state: str, message: str = "") -> None:
        self.metric_tabs.set_state(name, state, message)
        self.metric_list.set_state(name, state, message)

    # --- controller hooks -----------------------------------------------------------------------------
    def _on_records(self, name: str, records: list) -> None:
        self.session.record(records)
        tab = self.metric_tabs.for_records(name)
        if tab is not None:
            tab.feed(records)

    def _on_log(self, name: str, line: str) -> None:
        self.log(line, name)

    def _on_started(self, name: str) -> None:
        self.running.add(name)
        self._set_state(name, "running")
        if name in self.forms:
            self.forms[name].show_message("")
        self.log(f"{name}: running")

    def _on_finished(self, name: str, status: int, error: str) -> None:
        self.running.discard(name)
        if error:
            # the reason once: in the tab (and beside the argument it names); the log says where to look
            self.failed[name] = error
            self._set_state(name, "failed", f"exit status {status}: {error}")
            self.log(f"{name}: FAILED (exit status {status}); the reason is in its tab")
            self.forms[name].mark_named_argument(error)
        else:
            self._set_state(name, "stopped")
            self.log(f"{name}: stopped (exit status {status})")
        self._stats_off_if_idle()
        self._show_activity()

    def apply_server(self) -> None:
        url, token = self._typed_url(empty_ok=True), self.ui.server_token.text() or None
        if url is None:
            return
        url = url or None
        self.controller.set_server(url, token)
        self.save_settings()
        self.log(f"collector: {url or 'none (records stay local)'}")
        if url:
            self.test_connection()          # the panel says at once whether it answers

    def test_connection(self) -> None:
        """The URL typed asked for /healthz on a thread of its own; the panel shows what came back."""
        url = self._typed_url()
        if url is None:
            return
        base = base_url(url) or url
        self.transport_panel.checking(base)
        self.connection_check.start(base)

    def _connection_checked(self, url: str, verdict: Any) -> None:
        self.transport_panel.show_check(url, verdict.ok, verdict.text)
        self.log(f"collector test: {url}: {verdict.text}")

    def _typed_url(self, empty_ok: bool = False) -> str | None:
        """The URL field's text as a collector URL (its http:// added; "" for none, if empty_ok), or None,
        with the reason marked on the field and shown as the panel's last error."""
        text = self.ui.server_url.text().strip()
        try:
            if not text and not empty_ok:
                raise ValueError("no collector URL to test: type one above")
            url = collector_url(text) if text else ""       # '127.0.0.1:5055' gets its http://
        except ValueError as exc:
            self.ui.server_url.setStyleSheet(INVALID_STYLE)
            self.ui.server_url.setToolTip(str(exc))
            self.transport_panel.refuse_url(str(exc))
            self.log(f"collector: {exc}")
            return None
        self.ui.server_url.setText(url)
        self.ui.server_url.setStyleSheet("")
        self.ui.server_url.setToolTip("")
        self.transport_panel.refuse_url("")
        return url

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
        self._show_activity()

    def _show_activity(self) -> None:
        """The status bar says how many metrics run and which failed, kept true as they start, end and
        fail; it leaves alone a message it did not write ("Not started: ...", an opened session's)."""
        running = len(self.running)
        parts = [f"{running} metric{'s' if running > 1 else ''} running"] if running else []
        if len(self.failed) == 1 and not running:
            (name, why), = self.failed.items()
            lines = [line for line in why.splitlines() if line.strip()]     # a script's error: its last line
            parts.append(f"{name} failed: {lines[-1].strip() if lines else 'no reason given'}")
        elif self.failed:
            parts.append(f"failed: {', '.join(sorted(self.failed))} (the reason is in each one's tab)")
        text = "  ·  ".join(parts) or "No metric running."
        current = self.statusBar().currentMessage()
        if (text == self._activity and current != text) or current.startswith("Not started"):
            return              # nothing new to say over another message (an opened session's, a refusal)
        self._activity = text
        if text != current:
            self.statusBar().showMessage(text)

    @property
    def transport_status(self) -> dict:
        return self.transport_panel.status

    def log(self, text: str, metric: str = "") -> None:
        """A line in the log: the app's own, or a metric's (its name beside it)."""
        self.log_panel.add(metric, text)

    def show_status(self, text: str, timeout_ms: int) -> None:
        self.statusBar().showMessage(text, timeout_ms)

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

    def overhead_sampled(self, rows: list, _summary: str = "", now: float | None = None) -> None:
        """An overhead sample: the budget's verdict, and each metric's cost in the list."""
        self.budget.sample(time.monotonic() if now is None else now, rows)
        self.metric_list.show_costs(self.budget.keeper.costs, self.running, self.budget.cpus)

    def _budget_said(self, name: str, line: str) -> None:
        self.log(line, name)
        if name:
            self.show_status(f"{name}: {line}", 15000)

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


def freeze_startup_objects() -> None:
    """Python's full garbage collection walks every tracked object holding the GIL, in whichever thread
    triggers it: with the window's Qt, pyqtgraph and numpy objects that took 40-80 ms while records
    flowed, a stall of the GUI thread however little it had to do. What exists once the window is built
    lives as long as the app, so it goes to the permanent generation, which collections skip."""
    gc.collect()
    gc.freeze()
