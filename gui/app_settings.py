"""Where the window keeps what it remembers between runs (the collector's URL and token, the checked
metrics, each form's values, its geometry): one INI file in the user's config directory, readable by
its owner only, since it holds the token."""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings


def app_settings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "ebpf-profiler", "profiler")


def private_settings(settings: QSettings) -> None:
    """Write the settings readable by their owner only: they hold the collector token."""
    previous = os.umask(0o077)  # the file Qt writes (a new one, renamed over the old) is born 0600
    try:
        settings.sync()
    finally:
        os.umask(previous)
    if settings.fileName() and os.path.exists(settings.fileName()):
        os.chmod(settings.fileName(), 0o600)  # one saved by an earlier version
