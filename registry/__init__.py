"""The registry: one entry per metric script — what it is, its arguments, and how to show its output.

A student adding a metric writes bpf/NAME.c, metrics/NAME.py, one entry registry/entries/NAME.py (a
module holding SPEC = MetricSpec(...)), one line in registry/catalog.py, its doc page
(docs/metrics/NAME.md) and a recorded sample (docs/adding-a-metric.md counts every file); the contract
test (tests/test_registry_contract.py) checks every entry against the real script, the sample and the page. The GUI builds argument forms, tables and charts from these declarations,
and the collector stores any metric's records, so neither needs code per metric (docs/adding-a-metric.md).

    args.py      Arg (one argument, declared once; Arg.convert parses its value, everywhere) and the shared
                 ones: interval_args(), PID, TID, PPID, CGROUP
    spec.py      MetricSpec, Field, Chart; ROOT, the checkout the entries' files are in
    records.py   parse_ndjson, the default output parser
    entries/     one module per metric
    catalog.py   METRICS in the app's order, get(name)
config.py, the card's entry point, re-exports these names: callers write config.METRICS, config.Arg.

One declaration per argument. Each argument of a metric is declared once, as an Arg in its entry, and
nowhere else: the script's argparse is built from the entry (bcctool.Tool("NAME", ...) looks it up and
adds every Arg: flag, short flag, type, bounds, choices, default, help), the GUI's form from the same
Args, and the doc page's options table is generated from them (scripts/gen_docs.py). So a metric
script never calls parser.add_argument; it reads `args = tool.parse_args()`. To add an argument:
    Arg("top", "--top", "int", "processes shown", default=10, minimum=1, maximum=1000, short="-T")
  - name is the argparse dest and the form's key; flag None makes it positional ([interval] [count]).
  - type "int"/"float" with minimum/maximum (checked by the form and by the script's parser alike),
    "choice" with choices, "str", or "flag" (store_true; the script's default is always off, `default`
    is only the form's initial state).
  - short ("-p"), aliases ("--per-packet"), metavar, cli_help (what --help says when it says more than
    the form's one-line help), target ("process", "thread", "block device", "network device": checked
    to exist before anything loads), shortcuts (e.g. -4/-6 setting --family), form=False for a
    script-only option (offcpu --folded), sample (a valid value the contract test passes).
A value a script must check further (a device name) gets a check through Tool(checks={name: function});
the declaration stays in the entry. Shared declarations: interval_args() ([interval] [count],
--duration), PID, TID, PPID, CGROUP.
"""

from __future__ import annotations

from registry.args import CGROUP, PID, PPID, TID, Arg, BadValue, Shortcut, interval_args
from registry.catalog import METRICS, get
from registry.records import parse_ndjson
from registry.spec import ROOT, Chart, Field, MetricSpec

__all__ = ["METRICS", "get", "Arg", "BadValue", "Shortcut", "interval_args", "PID", "TID", "PPID", "CGROUP",
           "MetricSpec", "Field", "Chart", "ROOT", "parse_ndjson"]
