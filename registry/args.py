"""A metric script's arguments: how one is declared (Arg), and the declarations many metrics share.

Each argument of a metric is declared once, as an Arg in its entry (registry/entries/NAME.py), and
nowhere else: the script's argparse (bcctool/arguments.py), the app's form (gui/forms.py), the privilege
helper's parser (host/privhelper.py) and the doc page's options table (scripts/gen_docs.py) are all
built from it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shortcut:
    """A flag that sets its argument to a fixed value, e.g. -4/--ipv4 for --family 4."""

    flags: tuple[str, ...]
    value: Any
    help: str


@dataclass(frozen=True)
class Arg:
    """One command-line argument of a metric script: how the script's parser, the app's form and the
    privilege helper take it, and the one converter of its value (convert).

    type: "int", "float", "str", "choice" or "flag". flag None means positional (in declared order).
    sample: a valid value the contract test passes to the script (defaults to `default`)."""

    name: str
    flag: str | None
    type: str
    help: str
    default: Any = None
    required: bool = False
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    sample: Any = None
    short: str = ""                      # the script's short flag, e.g. "-p"
    aliases: tuple[str, ...] = ()        # more long spellings the script accepts, e.g. "--per-packet"
    metavar: str = ""
    cli_help: str = ""                   # the script's --help text, when it says more than `help`
    target: str = ""                     # what the value names, checked to exist before loading
    shortcuts: tuple[Shortcut, ...] = ()  # flags that set this argument to a value (-4: --family 4)
    form: bool = True                    # False: the script's option only, not on the app's form
    label: str = ""                      # the form's label, when the name read as words says too little

    @property
    def title(self) -> str:
        """The form's label for a person: `label`, else the name as words ("min_block_us": "Min block (us)")."""
        if self.label:
            return self.label
        words = self.name.split("_")
        unit = words.pop() if len(words) > 1 and words[-1] in ("us", "ms", "ns", "s", "kb", "mb") else ""
        text = " ".join(words).capitalize().replace("Pid", "PID").replace("Tid", "TID").replace("Ppid", "PPID")
        return f"{text} ({unit})" if unit else text

    @property
    def flags(self) -> tuple[str, ...]:
        """Every option string the script accepts for this argument (none for a positional)."""
        if self.flag is None:
            return ()
        return (*((self.short,) if self.short else ()), self.flag, *self.aliases)

    def convert(self, text: Any) -> Any:
        """The value from its text — the command line's (argparse's `type`), the form's, the helper's —
        held to this declaration: a number within its bounds, one of the choices, a string without a
        control character, a flag's truth. The one place a value is parsed and checked; BadValue says
        why not, in one line."""
        if self.type == "flag":
            return bool(text)
        if self.type in ("int", "float"):
            try:
                number = int(text) if self.type == "int" else float(text)
            except (TypeError, ValueError):
                raise BadValue(f"must be {'an integer' if self.type == 'int' else 'a number'}") from None
            if not math.isfinite(number):     # NaN would pass both bounds below; inf and 1e400 overflow
                raise BadValue("must be a finite number")
            if self.minimum is not None and number < self.minimum:
                raise BadValue(f"must be at least {_number(self.minimum)}")
            if self.maximum is not None and number > self.maximum:
                raise BadValue(f"must be at most {_number(self.maximum)}")
            return number
        if self.type == "choice":
            if text not in self.choices:
                raise BadValue(f"must be one of {', '.join(self.choices)}")
            return text
        text = str(text)
        if any(c in text for c in "\0\n"):
            raise BadValue("has a control character")
        return text

    def value_of(self, raw: Any) -> Any:
        """A form's value (its text, a spin box's number, a check box's state) as the script gets it:
        None when empty and not required, else convert(raw). BadValue names the argument ("pid must be
        at least 1", "target is required")."""
        if raw is None or raw == "":
            if self.required:
                raise BadValue(f"{self.name} is required")
            return None
        try:
            return self.convert(raw)
        except BadValue as exc:
            raise BadValue(f"{self.name} {exc}") from None


class BadValue(ValueError, argparse.ArgumentTypeError):
    """Why a value is refused, in one line ("must be at least 1"). An ArgumentTypeError, so argparse
    shows it as it is after the option ("argument -p/--pid: must be at least 1")."""


def _number(value: float) -> str:
    """A bound as a person writes it: 1, 0.01, 1000000 (not 1e+06)."""
    return f"{int(value)}" if float(value).is_integer() else f"{value:g}"


def interval_args(default: float = 1.0) -> tuple[Arg, ...]:
    return (
        Arg("interval", None, "float", "seconds between outputs", default=default, minimum=0.01, maximum=3600,
            cli_help=f"seconds between outputs (default {default:g}, or the --duration)"),
        Arg("count", None, "int", "number of outputs, then exit (empty: until stopped)", minimum=1, sample=3,
            cli_help="number of outputs, then exit (default: until Ctrl-C or the --duration)"),
        Arg("duration", "--duration", "float", "total seconds to run (empty: until stopped)", minimum=0.1,
            sample=5, short="-d", metavar="SECONDS",
            cli_help="total seconds to run, then exit (whichever of count and duration comes first)"),
    )


_ENDS = "; the metric ends when it exits"
PID = Arg("pid", "--pid", "int", "trace this process id only", minimum=1, sample=1, short="-p", target="process",
          cli_help=f"trace this process id only{_ENDS}")
TID = Arg("tid", "--tid", "int", "trace this thread id only", minimum=1, sample=1, target="thread",
          cli_help=f"trace this thread id only{_ENDS}")
PPID = Arg("ppid", "--ppid", "int", "trace children of this parent pid only", minimum=1, sample=1, target="process",
           cli_help=f"trace children of this parent pid only{_ENDS}")
# checked by the harness itself (bcctool.cgroups.resolve_target: a group of the v2 hierarchy)
CGROUP = Arg("cgroup", "--cgroup", "str", "trace this cgroup (v2) and every group below it", metavar="PATH",
             sample="/sys/fs/cgroup",
             cli_help="trace this cgroup v2 group (absolute, or a path under the v2 mount) and every group "
                      "below it, also those made after start")
# stack metrics: native frames named with their source line (bcctool/lines.py); off by default, as each
# object's debug sections are read and kept (libc6-dbg's: 0.14 s, 4 MB) and each unit hit costs ~20 ms
SOURCE_LINES = Arg("source_lines", "--source-lines", "flag", "name native frames with their file:line (-g builds, "
                   "-dbg/-dbgsym packages)", default=False,
                   cli_help="name each native user frame \"function (file.c:LINE)\" from the DWARF line tables of "
                            "its object or of its installed debug file (a -g build, a -dbg/-dbgsym package); "
                            "each line of a function is then its own frame")
# a system-wide run leaves out the profiler's own processes (bcctool/own.py): the script, the app that
# started it (--app-pid, which the app passes) and every process below them; the form's check box counts them
INCLUDE_SELF = Arg("include_self", "--include-self", "flag", "include the profiler's own processes (left out by "
                   "default)", default=False, label="Include the profiler's own processes",
                   cli_help="count the profiler's own processes too: this script, the app given by --app-pid and "
                            "every process below them (left out of a system-wide run by default; a -p, --tid, "
                            "--ppid or --cgroup target is traced whole)")
APP_PID_ENV = "PROFILER_APP_PID"   # set by the launcher for the app: the launcher's pid, whose tree holds the collector
APP_PID = Arg("app_pid", "--app-pid", "int", "the profiler app that started this metric", minimum=1, sample=1,
              metavar="PID", form=False,
              cli_help="the profiler app that started this metric (the window, the headless runner, the launcher): "
                       "it and every process below it are the profiler's own (the app passes its own pid)")
