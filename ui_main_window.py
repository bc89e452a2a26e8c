"""The main window's layout, and nothing else: widgets, where they sit, their names. Behaviour lives in
gui/main_window.py (MainWindow), which calls Ui_MainWindow().setupUi(self) and connects these widgets.

    +--------------------------+--------------------------------------------------+
    | Metrics (check to run)   |  [sysnest] [pagefault] ...  one tab per metric   |
    |  [Start checked][Stop all]|    state · summary                    [Stop]     |
    | Run a command [    ][Run]|    chart                                         |
    | Arguments of the selected|                                                  |
    |  metric                  |    table of the latest interval                  |
    | Collector: URL, token,   +--------------------------------------------------+
    |  reachable, sent, ...    |  Log | BPF overhead | Overhead over time        |
    +--------------------------+--------------------------------------------------+
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTabWidget,
    QTreeWidget,
    QVBoxLayout,
    QWidget,
)

TRANSPORT_FIELDS = (
    ("reachable", "Collector"),
    ("buffered", "Buffered"),
    ("sent", "Sent"),
    ("pending_outbox", "Outbox"),
    ("dropped", "Dropped"),
    ("last_error", "Last error"),
    ("test", "Test"),
)
WIDE_FIELDS = ("last_error", "test")       # a line of text each, under the counts


class Ui_MainWindow:  # noqa: N801 - Qt Designer's naming, as the original had it
    def setupUi(self, window: QMainWindow) -> None:  # noqa: N802
        window.setObjectName("MainWindow")
        window.setWindowTitle("eBPF profiler")
        window.resize(1400, 900)

        splitter = QSplitter(Qt.Orientation.Horizontal, window)
        splitter.setChildrenCollapsible(False)
        window.setCentralWidget(splitter)
        splitter.addWidget(self._left_panel(window))
        splitter.addWidget(self._right_panel(window))
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([430, 970])
        self.splitter = splitter
        window.statusBar().showMessage("Check metrics and press Start.")

    # --- left: what to run, how, and where to send it --------------------------------------------
    def _left_panel(self, window: QMainWindow) -> QWidget:
        panel = QWidget(window)
        panel.setMinimumWidth(360)
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(6, 6, 0, 6)

        metrics_box = QGroupBox("Metrics", panel)
        box_layout = QVBoxLayout(metrics_box)
        self.metric_list = QTreeWidget(metrics_box)
        self.metric_list.setObjectName("metric_list")
        self.metric_list.setColumnCount(4)
        self.metric_list.setHeaderLabels(["Metric", "State", "Cost", "Description"])
        self.metric_list.setRootIsDecorated(False)
        self.metric_list.setUniformRowHeights(True)
        self.metric_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.metric_list.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        box_layout.addWidget(self.metric_list)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("▶  Start checked", metrics_box)
        self.start_button.setObjectName("start_button")
        self.start_button.setShortcut(QKeySequence("Ctrl+R"))
        self.start_button.setToolTip("start every checked metric that is not running (Ctrl+R)")
        bold = QFont(self.start_button.font())
        bold.setBold(True)
        self.start_button.setFont(bold)
        self.stop_all_button = QPushButton("■  Stop all", metrics_box)
        self.stop_all_button.setObjectName("stop_all_button")
        self.stop_all_button.setToolTip("stop every running metric")
        buttons.addWidget(self.start_button, 1)
        buttons.addWidget(self.stop_all_button)
        box_layout.addLayout(buttons)
        sessions = QHBoxLayout()
        self.record_button = QPushButton("●  Record…", metrics_box)
        self.record_button.setObjectName("record_button")
        self.record_button.setToolTip("save every record of every metric from now on to a file, to open later")
        self.open_session_button = QPushButton("Open session…", metrics_box)
        self.open_session_button.setObjectName("open_session_button")
        self.open_session_button.setToolTip("show a recorded run: no root, BPF or collector needed")
        sessions.addWidget(self.record_button)
        sessions.addWidget(self.open_session_button)
        box_layout.addLayout(sessions)
        layout.addWidget(metrics_box, 0)
        layout.addWidget(self._command_box(panel), 0)

        args_box = QGroupBox("Arguments", panel)
        self.args_box = args_box
        args_layout = QVBoxLayout(args_box)
        self.arg_description = QLabel(args_box)
        self.arg_description.setWordWrap(True)
        self.arg_description.setStyleSheet("color: #555;")
        args_layout.addWidget(self.arg_description)
        self.arg_stack = QStackedWidget(args_box)
        scroll = QScrollArea(args_box)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(self.arg_stack)
        args_layout.addWidget(scroll, 1)
        self.reset_args_button = QPushButton("Defaults", args_box)
        self.reset_args_button.setToolTip("put this metric's arguments back to the registry defaults")
        reset_row = QHBoxLayout()
        reset_row.addStretch(1)
        reset_row.addWidget(self.reset_args_button)
        args_layout.addLayout(reset_row)
        layout.addWidget(args_box, 1)

        layout.addWidget(self._transport_box(panel), 0)
        return panel

    def _command_box(self, parent: QWidget) -> QGroupBox:
        box = QGroupBox("Run a command", parent)
        box.setToolTip("start the checked metrics limited to a new cgroup, run the command in it once every "
                       "metric is attached, and stop them when it exits")
        layout = QVBoxLayout(box)
        row = QHBoxLayout()
        self.command_line = QLineEdit(box)
        self.command_line.setObjectName("command_line")
        self.command_line.setPlaceholderText("a command, e.g. make -j2 (under the checked metrics)")
        self.command_line.setClearButtonEnabled(True)
        self.run_command_button = QPushButton("Run", box)
        self.run_command_button.setObjectName("run_command_button")
        row.addWidget(self.command_line, 1)
        row.addWidget(self.run_command_button)
        layout.addLayout(row)
        self.command_status = QLabel(box)
        self.command_status.setObjectName("command_status")
        self.command_status.setWordWrap(True)
        self.command_status.setTextFormat(Qt.TextFormat.PlainText)   # the command's own text: never markup
        self.command_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.command_status)
        return box

    def _transport_box(self, parent: QWidget) -> QGroupBox:
        box = QGroupBox("Collector", parent)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.server_url = QLineEdit(box)
        self.server_url.setObjectName("server_url")
        self.server_url.setPlaceholderText("http://127.0.0.1:5000/data")
        self.server_token = QLineEdit(box)
        self.server_token.setObjectName("server_token")
        self.server_token.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.server_token.setPlaceholderText("(none)")
        self.apply_server_button = QPushButton("Apply", box)
        self.test_server_button = QPushButton("Test connection", box)
        self.test_server_button.setObjectName("test_server_button")
        self.test_server_button.setToolTip("ask the URL typed above for the collector's /healthz, now")
        url_row = QHBoxLayout()
        url_row.addWidget(self.server_url, 1)
        url_row.addWidget(self.apply_server_button)
        form.addRow("URL", url_row)
        token_row = QHBoxLayout()
        token_row.addWidget(self.server_token, 1)
        token_row.addWidget(self.test_server_button)
        form.addRow("Token", token_row)
        grid = QGridLayout()
        grid.setHorizontalSpacing(12)
        self.transport_labels: dict[str, QLabel] = {}
        for i, (key, title) in enumerate(TRANSPORT_FIELDS):
            value = QLabel("–", box)
            value.setObjectName(f"transport_{key}")
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setTextFormat(Qt.TextFormat.PlainText)  # the collector's reason: remote text, never markup
            if key in WIDE_FIELDS:
                value.setWordWrap(True)
                row = 3 + WIDE_FIELDS.index(key)
                grid.addWidget(QLabel(title, box), row, 0)
                grid.addWidget(value, row, 1, 1, 3)
            else:
                grid.addWidget(QLabel(title, box), i // 2, (i % 2) * 2)
                grid.addWidget(value, i // 2, (i % 2) * 2 + 1)
            self.transport_labels[key] = value
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        form.addRow(grid)
        return box

    # --- right: the running metrics, the log and what the profiler costs -------------------------
    def _right_panel(self, window: QMainWindow) -> QWidget:
        splitter = QSplitter(Qt.Orientation.Vertical, window)
        splitter.setChildrenCollapsible(False)
        self.right_stack = QStackedWidget(splitter)
        hint = QLabel("Check one or more metrics on the left, set their arguments, and press Start.\n"
                      "Each running metric gets a tab here with a live chart and table.", self.right_stack)
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setStyleSheet("color: #777; font-size: 14px;")
        self.right_stack.addWidget(hint)
        self.metric_tabs = QTabWidget(self.right_stack)
        self.metric_tabs.setObjectName("metric_tabs")
        self.metric_tabs.setDocumentMode(True)
        self.metric_tabs.setTabsClosable(True)
        self.metric_tabs.setMovable(True)
        self.right_stack.addWidget(self.metric_tabs)
        splitter.addWidget(self.right_stack)

        self.bottom_tabs = QTabWidget(splitter)
        self.bottom_tabs.setObjectName("bottom_tabs")
        self.log_view = QPlainTextEdit(self.bottom_tabs)
        self.log_view.setObjectName("log_view")
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(5000)         # a bounded log
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFont("DejaVu Sans Mono")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setPointSize(9)
        self.log_view.setFont(mono)
        self.bottom_tabs.addTab(self.log_view, "Log")

        overhead = QWidget(self.bottom_tabs)
        overhead_layout = QVBoxLayout(overhead)
        overhead_layout.setContentsMargins(4, 4, 4, 4)
        self.overhead_status = QLabel("bpf_stats: off (turned on while metrics run)", overhead)
        self.overhead_status.setObjectName("overhead_status")
        self.overhead_status.setWordWrap(True)
        overhead_layout.addWidget(self.overhead_status)
        overhead_layout.addLayout(self._budget_row(overhead))
        self.budget_state = QLabel(overhead)
        self.budget_state.setObjectName("budget_state")
        self.budget_state.setWordWrap(True)
        overhead_layout.addWidget(self.budget_state)
        self.overhead_table = QTableView(overhead)
        self.overhead_table.setObjectName("overhead_table")
        self.overhead_table.setSortingEnabled(True)
        self.overhead_table.verticalHeader().setVisible(False)
        self.overhead_table.verticalHeader().setDefaultSectionSize(22)
        self.overhead_table.setAlternatingRowColors(True)
        overhead_layout.addWidget(self.overhead_table, 1)
        self.bottom_tabs.addTab(overhead, "BPF overhead")
        # the profiler's cost over time (gui/cost_chart.py): a tab of its own, so the table beside it
        # keeps every column whole
        self.overhead_chart_host = QWidget(self.bottom_tabs)
        self.overhead_chart_host.setObjectName("overhead_chart_host")
        self.overhead_chart_host.setLayout(QVBoxLayout())
        self.overhead_chart_host.layout().setContentsMargins(4, 4, 4, 4)
        self.bottom_tabs.addTab(self.overhead_chart_host, "Overhead over time")
        splitter.addWidget(self.bottom_tabs)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([680, 200])
        return splitter

    def _budget_row(self, parent: QWidget) -> QHBoxLayout:
        """The overhead budget (gui/budget_panel.py): a share of the machine's CPU, and what to do when the
        profiler stays over it."""
        row = QHBoxLayout()
        row.addWidget(QLabel("Overhead budget", parent))
        self.budget_edit = QLineEdit(parent)
        self.budget_edit.setObjectName("budget_edit")
        self.budget_edit.setMaximumWidth(60)
        self.budget_edit.setToolTip("the share of the machine's CPU (all CPUs) the profiler may take: its metrics' "
                                    "BPF programs and processes and this window; above 0, at most 100")
        row.addWidget(self.budget_edit)
        self.budget_over_label = QLabel("% of the machine's CPU; over it, the metric that costs most:", parent)
        row.addWidget(self.budget_over_label)
        self.budget_action = QComboBox(parent)
        self.budget_action.setObjectName("budget_action")
        row.addWidget(self.budget_action)
        row.addStretch(1)
        return row
