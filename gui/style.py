"""The window's colours, in one place: what good, bad and quiet look like, each state's colour, and the
palette chart series take in turn."""

from __future__ import annotations

GOOD = "#2e7d32"          # running, reachable
BAD = "#c62828"           # failed, errors, drops
QUIET = "#6d6d6d"         # starting, stopping, stopped, nothing to say yet
UNAVAILABLE = "#9e9e9e"   # a metric this machine cannot run
TEXT = "#333"
ERROR_BACKGROUND = "#ffebee"

# a metric's state in the metric list (the text colour of its state column)
STATE_COLOURS = {"running": GOOD, "starting": QUIET, "stopping": QUIET, "failed": BAD, "unavailable": UNAVAILABLE}
# a metric's state in its tab's header
STATE_STYLE = {
    "starting": f"color: {QUIET};",
    "running": f"color: {GOOD}; font-weight: bold;",
    "stopping": f"color: {QUIET};",
    "stopped": f"color: {QUIET};",
    "failed": f"color: {BAD}; font-weight: bold;",
}
ERROR_STYLE = f"color: {BAD};"
INVALID_STYLE = f"border: 1px solid {BAD};"
ERROR_BANNER_STYLE = f"color: {BAD}; background: {ERROR_BACKGROUND}; padding: 4px;"
QUIET_STYLE = f"color: {QUIET};"
# what the app did to a metric's run (the overhead budget's note), above its tab's charts
NOTE_BANNER_STYLE = f"color: {TEXT}; background: #fff8e1; padding: 4px;"
BUDGET = "#ad1457"        # the overhead budget's line on the cost chart
ALARM_STYLE = f"color: {BAD}; font-weight: bold;"

# a differential flame graph's legend: a frame whose share grew, or shrank, against the baseline
GREW = "#ff2323"
SHRANK = "#2323ff"

# chart series, in turn; as many series as colours
PALETTE = ("#1565c0", "#e65100", GOOD, "#6a1b9a", BAD, "#00838f", "#9e9d24", "#4e342e")
# series whose name says what they are keep one colour in every chart: a failed connect is always red
SERIES_COLOURS = {"failed": BAD, "ok": PALETTE[0], "read": PALETTE[0], "write": PALETTE[1]}
