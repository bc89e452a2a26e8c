"""A registry Arg (registry/args.py) as an argparse argument, and the parser that reports a bad one in one line.

Tool builds a script's parser from its entry through add_argument(); parser_options() reads the parser
back for the contract test (tests/test_registry_contract.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import config

HARNESS_DESTS = ("validate_args", "list_args", "interval_opt")   # the harness's own, not the metric's


def value_parser(arg: config.Arg, check: Callable[[Any], Any] | None = None) -> Callable[[str], Any]:
    """argparse's `type` for an Arg: Arg.convert (the registry's one parser of a value: type, bounds,
    choices), then the script's own further check of the value, if it has one (Tool's `checks`)."""
    if check is None:
        return arg.convert
    return lambda text: check(arg.convert(text))


def add_argument(parser: argparse.ArgumentParser, arg: config.Arg, check: Callable[[Any], Any] | None = None,
                 canonical: bool = False) -> None:
    """Add one registry Arg to a parser: its flags, type (value_parser), choices, default and help.

    canonical: the command line as MetricSpec.command writes it, which the privilege helper parses —
    the long flag alone (no short flag, alias or shortcut) and no default filled in for an option not
    given, so the command rebuilt from the values holds what was asked and nothing more."""
    text = (arg.cli_help or arg.help).replace("%", "%%")
    flags = (arg.flag,) if canonical and arg.flag else arg.flags
    if arg.type == "flag":
        parser.add_argument(*flags, dest=arg.name, action="store_true", help=text)
        return
    options: dict[str, Any] = {"help": text, "type": value_parser(arg, check)}
    if arg.metavar:
        options["metavar"] = arg.metavar
    if arg.type == "choice":
        options["choices"] = list(arg.choices)     # for --help; convert refuses another value first
    if arg.flag is None:
        # positionals stay None when not given: the harness applies the rule ([interval] [count])
        parser.add_argument(arg.name, nargs="?", default=None, **options)
        return
    if canonical:
        parser.add_argument(*flags, dest=arg.name, default=None, **options)
        return
    target = parser
    if arg.shortcuts:
        target = parser.add_mutually_exclusive_group()
    target.add_argument(*flags, dest=arg.name, default=arg.default, **options)
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
