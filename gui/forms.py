"""A metric's argument form, generated from its registry entry (config.Arg): a combo for choices, a check
box for flags, a line edit otherwise (numbers too: a spin box's validator drops a letter without a word,
the line edit keeps it and says why it is refused). Required arguments are marked, help is the tooltip,
and a bad value is refused with the reason next to its field (checked as it is typed, and again before
anything starts), as is a pid or device that names nothing here (the script's own check, bcctool/targets.py,
where it only reads a file). Values are kept between sessions in QSettings.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QWidget,
)

import config
from bcctool.targets import QUICK_TARGETS, TARGET_CHECKS
from gui.style import ERROR_STYLE, INVALID_STYLE


def _unset_text(arg: config.Arg) -> str:
    return "(until stopped)" if arg.name == "count" else "(not set)"


def target_error(arg: config.Arg, value: object) -> str:
    """'pid 3999999: no such process' for a value that names no existing target, by the check the script
    makes before it loads; only the checks that read a file or two run here, on the GUI thread (a network
    device of another namespace takes a walk over every process: the script checks that one)."""
    if value is None or arg.target not in QUICK_TARGETS or TARGET_CHECKS[arg.target](value):
        return ""
    return f"{arg.name} {value}: no such {arg.target}"


class ArgForm(QWidget):
    """The form of one metric. raw_values() -> what the widgets hold; validate() -> (values, errors)."""

    changed = Signal()

    def __init__(self, spec: config.MetricSpec, settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.spec = spec
        self.args = [arg for arg in spec.args if arg.form]     # not the script-only options
        self.settings = settings
        self.editors: dict[str, QWidget] = {}
        self.errors: dict[str, QLabel] = {}
        self.labels: dict[str, QLabel] = {}
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        self.message = QLabel(self)           # a start error that belongs to no one field
        self.message.setStyleSheet(ERROR_STYLE)
        self.message.setWordWrap(True)
        self.message.hide()
        layout.addRow(self.message)
        for arg in self.args:
            editor = self._editor(arg)
            editor.setObjectName(f"arg_{arg.name}")
            tip = f"{arg.help}\n{arg.flag or 'positional'}" + (f", default {arg.default}" if arg.default not in (None, False) else "")
            editor.setToolTip(tip)
            error = QLabel(self)
            error.setObjectName(f"error_{arg.name}")
            error.setStyleSheet(ERROR_STYLE)
            error.setWordWrap(True)       # a long reason (a metric's own failure) wraps beside its field
            error.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            error.hide()
            row = QHBoxLayout()
            row.setContentsMargins(0, 0, 0, 0)
            row.addWidget(editor, 1)
            row.addWidget(error, 1)
            label = QLabel(f"<b>{arg.title}</b> *" if arg.required else arg.title, self)
            label.setToolTip(tip)
            layout.addRow(label, row)
            self.editors[arg.name] = editor
            self.labels[arg.name] = label
            self.errors[arg.name] = error
        self.load()

    # --- widgets --------------------------------------------------------------------------------
    def _editor(self, arg: config.Arg) -> QWidget:
        if arg.type == "choice":
            combo = QComboBox(self)
            if not arg.required and arg.default is None:
                combo.addItem("")
            combo.addItems([str(c) for c in arg.choices])
            combo.currentIndexChanged.connect(lambda _i, a=arg: self._check(a))
            return combo
        if arg.type == "flag":
            check = QCheckBox(self)
            check.toggled.connect(lambda _b, a=arg: self._check(a))
            return check
        edit = QLineEdit(self)
        if arg.default is not None:
            edit.setPlaceholderText(str(arg.default))
        elif not arg.required:
            edit.setPlaceholderText(_unset_text(arg))
        edit.textChanged.connect(lambda _t, a=arg: self._check(a))
        return edit

    def _get(self, arg: config.Arg) -> Any:
        editor = self.editors[arg.name]
        if isinstance(editor, QComboBox):
            return editor.currentText() or None
        if isinstance(editor, QCheckBox):
            return editor.isChecked()
        text = editor.text().strip()
        return text if text else arg.default

    def _set(self, arg: config.Arg, value: Any) -> None:
        editor = self.editors[arg.name]
        if isinstance(editor, QComboBox):
            index = editor.findText("" if value is None else str(value))
            editor.setCurrentIndex(max(index, 0))
        elif isinstance(editor, QCheckBox):
            editor.setChecked(value in (True, "true", "1", 1))
        else:
            shown = "" if value is None or str(value) == str(arg.default) else str(value)
            editor.setText(shown)

    # --- values -----------------------------------------------------------------------------------
    def raw_values(self) -> dict[str, Any]:
        return {arg.name: self._get(arg) for arg in self.args}

    def set_values(self, values: dict[str, Any]) -> None:
        for arg in self.args:
            if arg.name in values:
                self._set(arg, values[arg.name])

    def reset(self) -> None:
        for arg in self.args:
            self._set(arg, arg.default)

    def validate(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Every field checked; each error shown next to its field. (values to start with, errors)."""
        self.show_message("")
        values, errors = self.spec.validate(self.raw_values())
        for arg in self.args:
            if arg.name not in errors and (missing := target_error(arg, values.get(arg.name))):
                errors[arg.name] = missing
                values.pop(arg.name, None)
            self._show_error(arg.name, errors.get(arg.name, ""))
        return values, errors

    def _check(self, arg: config.Arg) -> None:
        try:
            value = arg.value_of(self._get(arg))     # Arg.convert, as the script's parser takes it
            error = target_error(arg, value)
        except config.BadValue as exc:
            error = str(exc)
        self._show_error(arg.name, error)
        self.changed.emit()

    def _show_error(self, name: str, text: str) -> None:
        label, editor = self.errors[name], self.editors[name]
        label.setText(text)
        label.setToolTip(text)
        label.setVisible(bool(text))
        editor.setStyleSheet(INVALID_STYLE if text else "")

    def mark_named_argument(self, reason: str) -> str | None:
        """A metric's failure that names one of its arguments ('argument --lport: ...', 'pid 99 does not
        exist'): that field is marked with the reason. Returns the argument's name, if any."""
        # its flags first (--lport), then a bare name (argparse's 'argument interval', 'pid 99'); the
        # line that names it is shown (a script's usage lines are not), the whole reason in the tooltip
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        for words in (lambda a: a.flags, lambda a: (a.name,)):
            for arg in self.args:
                named = [line for line in lines
                         if any(re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", line) for w in words(arg))]
                if named:
                    self._show_error(arg.name, named[-1])
                    self.errors[arg.name].setToolTip(reason)
                    return arg.name
        return None

    def show_message(self, text: str) -> None:
        """An error about the whole start (e.g. the controller refused the values)."""
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def error_text(self, name: str) -> str:
        return self.errors[name].text()

    # --- persistence ---------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return f"metrics/{self.spec.name}/{name}"

    def load(self) -> None:
        """Defaults, then whatever the last session saved."""
        self.reset()
        if self.settings is None:
            return
        for arg in self.args:
            key = self._key(arg.name)
            if self.settings.contains(key):
                value = self.settings.value(key)
                self._set(arg, None if value == "" else value)
        for arg in self.args:
            self._show_error(arg.name, "")

    def save(self) -> None:
        if self.settings is None:
            return
        for name, value in self.raw_values().items():
            stored = "" if value is None else ("true" if value is True else "false" if value is False else str(value))
            self.settings.setValue(self._key(name), stored)
