"""A metric script's arguments: how one is declared (Arg), and the declarations many metrics share.

Each argument of a metric is declared once, as an Arg in its entry (registry/entries/NAME.py), and
nowhere else: the script's argparse (bcctool/arguments.py), the app's form (gui/forms.py), the privilege
helper's parser (host/privhelper.py) and the doc page's options table (scripts/gen_docs.py) are all
built from it.
"""

from __future__ import annotations

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
    """One command-line argument of a metric script, as the GUI shows and validates it.

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

    def validate(self, value: Any) -> tuple[Any, str | None]:
        """(converted value, None) or (None, reason). Empty optional values convert to None."""
        if value is None or value == "":
            return (None, f"{self.name} is required") if self.required else (None, None)
        if self.type == "flag":
            return bool(value), None
        if self.type in ("int", "float"):
            try:
                number = int(value) if self.type == "int" else float(value)
            except (TypeError, ValueError):
                return None, f"{self.name} must be {'an integer' if self.type == 'int' else 'a number'}"
            if not math.isfinite(number):     # NaN would pass both bounds below; inf and 1e400 overflow
                return None, f"{self.name} must be a finite number"
            if self.minimum is not None and number < self.minimum:
                return None, f"{self.name} must be at least {self.minimum:g}"
            if self.maximum is not None and number > self.maximum:
                return None, f"{self.name} must be at most {self.maximum:g}"
            return number, None
        if self.type == "choice":
            return (value, None) if value in self.choices else (None, f"{self.name} must be one of {', '.join(self.choices)}")
        text = str(value)
        if any(c in text for c in "\0\n"):
            return None, f"{self.name} has a control character"
        return text, None


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
