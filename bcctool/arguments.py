"""A registry Arg (registry/args.py) as an argparse argument, and the parser that reports a bad one in one line.

Tool builds a script's parser from its entry through add_argument(); parser_options() reads the parser
back for the contract test (tests/test_registry_contract.py).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import config

HARNESS_DESTS = ("validate_args", "list_args", "interval_opt")   # the harness's own, not the metric's


def value_parser(arg: config.Arg, parse: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """The argparse type of an int, float or str Arg: converts, then holds it to the Arg's bounds."""
    convert = {"int": int, "float": float}.get(arg.type)
    noun = {"int": "an integer", "float": "a number"}.get(arg.type)

    def parse_value(text: str) -> Any:
        if parse is not None:
            value = parse(text)
        elif convert is None:
            value = text
        else:
            try:
                value = convert(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
            if not math.isfinite(value):
                raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        if convert is not None:
            if arg.minimum is not None and value < arg.minimum:
                raise argparse.ArgumentTypeError(f"must be at least {_number(arg.minimum)}: {text}")
            if arg.maximum is not None and value > arg.maximum:
                raise argparse.ArgumentTypeError(f"must be at most {_number(arg.maximum)}: {text}")
        return value

    parse_value.__name__ = arg.type     # argparse names the type in some messages
    return parse_value


def _number(value: float) -> str:
    return f"{int(value)}" if float(value).is_integer() else f"{value:g}"


def add_argument(parser: argparse.ArgumentParser, arg: config.Arg, parse: Callable[[str], Any] | None = None) -> None:
    """Add one registry Arg to a script's parser: its flags, type and bounds, choices, default and help."""
    text = (arg.cli_help or arg.help).replace("%", "%%")
    if arg.type == "flag":
        parser.add_argument(*arg.flags, dest=arg.name, action="store_true", help=text)
        return
    options: dict[str, Any] = {"help": text}
    if arg.metavar:
        options["metavar"] = arg.metavar
    if arg.type == "choice":
        options["choices"] = list(arg.choices)
    else:
        options["type"] = value_parser(arg, parse)
    if arg.flag is None:
        # positionals stay None when not given: the harness applies the rule ([interval] [count])
        parser.add_argument(arg.name, nargs="?", default=None, **options)
        return
    target = parser
    if arg.shortcuts:
        target = parser.add_mutually_exclusive_group()
    target.add_argument(*arg.flags, dest=arg.name, default=arg.default, **options)
    for shortcut in arg.shortcuts:
        target.add_argument(*shortcut.flags, dest=arg.name, action="store_const", const=shortcut.value,
                            help=shortcut.help)


def parser_options(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """What a parser accepts, argument by argument (the contract test compares it with the registry)."""
    return [{"dest": a.dest, "flags": list(a.option_strings), "default": a.default,
             "choices": list(a.choices) if a.choices else None, "const": a.const}
            for a in parser._actions if a.dest not in ("help", "json", *HARNESS_DESTS)]


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as a single line on stderr and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
