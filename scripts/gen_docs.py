#!/usr/bin/env python3
"""The parts of the docs that the registry (config.py) declares, written from it: each metric page's
options table (docs/metrics/NAME.md, from the parser bcctool builds out of the entry) and the README's
table of metrics. `python scripts/gen_docs.py` rewrites them; `--check` only says which are stale and
exits 1 (tests/test_registry_contract.py runs it), so the docs cannot drift from the registry.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: the checkout's own modules

import bcctool  # noqa: E402
import config  # noqa: E402

OPTIONS_BEGIN = "<!-- options: generated from config.py by scripts/gen_docs.py; edit the entry, then run it -->"
OPTIONS_END = "<!-- end of options -->"
TABLE_BEGIN = "<!-- metrics: generated from config.py by scripts/gen_docs.py -->"
TABLE_END = "<!-- end of metrics -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def options_table(spec: config.MetricSpec) -> str:
    """The script's options as its parser has them: flags, value, default, help."""
    parser = bcctool.Tool(spec.name, spec.description, []).parser
    declared = {arg.name: arg for arg in spec.args}
    lines = ["| option | value | default | what it does |", "| --- | --- | --- | --- |"]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or action.dest == "help":
            continue
        names = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`[{action.dest}]`"
        if action.choices:
            value = ", ".join(str(c) for c in action.choices)
        elif action.nargs == 0:
            value = ""
        else:
            value = action.metavar or action.dest.upper()
            arg = declared.get(action.dest)
            if arg is not None and (arg.minimum is not None or arg.maximum is not None):
                low = "" if arg.minimum is None else f"{arg.minimum:g}"
                high = "" if arg.maximum is None else f"{arg.maximum:g}"
                value += f" ({low}..{high})"
        default = "" if action.default in (None, False) else str(action.default)
        if action.dest == "interval" and not action.option_strings:
            default = f"{spec_default(spec, 'interval'):g}"
        help_text = (action.help or "").replace("%%", "%")
        lines.append(f"| {names} | {_cell(value)} | {_cell(default)} | {_cell(help_text)} |")
    return "\n".join(lines)


def spec_default(spec: config.MetricSpec, name: str) -> float:
    return next(arg.default for arg in spec.args if arg.name == name)


def metrics_table() -> str:
    """README's table: every metric, what it measures, its doc page."""
    lines = ["| metric | what it measures | page |", "| --- | --- | --- |"]
    for spec in config.METRICS:
        page = f"[{os.path.basename(spec.doc)}]({spec.doc})" if spec.doc else ""
        lines.append(f"| `{spec.name}` | {_cell(spec.description)} | {page} |")
    return "\n".join(lines)


def with_section(text: str, begin: str, end: str, body: str, heading: str) -> str:
    """text with the generated section between begin and end replaced (or appended under heading)."""
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    return text.rstrip("\n") + f"\n\n{heading}\n\n{block}\n"


def wanted() -> dict[str, str]:
    """path -> the text it should have."""
    pages = {}
    for spec in config.METRICS:
        if not spec.doc:
            continue
        path = os.path.join(ROOT, spec.doc)
        with open(path) as f:
            pages[path] = with_section(f.read(), OPTIONS_BEGIN, OPTIONS_END, options_table(spec), "## Options")
    readme = os.path.join(ROOT, "README.md")
    with open(readme) as f:
        pages[readme] = with_section(f.read(), TABLE_BEGIN, TABLE_END, metrics_table(), "## Metrics")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in wanted().items():
        with open(path) as f:
            if f.read() == text:
                continue
        stale.append(os.path.relpath(path, ROOT))
        if not args.check:
            with open(path, "w") as f:
                f.write(text)
    if args.check and stale:
        print(f"stale (run scripts/gen_docs.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
