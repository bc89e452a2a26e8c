"""The registry contract: every entry's script exists, --help works without root, the script's parser
is built from the entry alone (one declaration per argument) and accepts what the form sends, the doc
page's options are the entry's and the page shows the script's captured output, and its parser turns
the script's recorded real output (a sample the tool itself wrote: its meta record first) into records.
A wrong entry fails here with a message naming the entry and the problem."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
from helpers import SAMPLES

import config
from client.wire import RECORD_SCHEMA

IDS = [spec.name for spec in config.METRICS]
# what bcctool.Tool.meta() writes into every meta record besides metric, kind and interval
HARNESS_META = ("ts", "schema", "kernel", "pid", "probes", "filters", "variant", "args")
PROBE_TYPES = ("tracepoint", "raw_tracepoint", "kprobe", "perf_event")   # Tool.attached_probes()'s


@pytest.fixture(scope="module")
def unprivileged_copy():
    """metrics/, bcctool/, bpf/, client/ (its wire format), config.py and registry/ (the scripts' arguments)
    copied where an unprivileged user can read them (the checkout may not be)."""
    dest = pathlib.Path(tempfile.mkdtemp(prefix="contract-"))
    for sub in ("metrics", "bcctool", "bpf", "client", "registry"):
        shutil.copytree(os.path.join(config.ROOT, sub), dest / sub)
    shutil.copy(os.path.join(config.ROOT, "config.py"), dest / "config.py")
    for path in [dest, *dest.rglob("*")]:
        os.chmod(path, 0o755)
    yield dest
    shutil.rmtree(dest, ignore_errors=True)


def test_names_are_unique():
    assert len(IDS) == len(set(IDS))


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_entry_is_complete(spec):
    assert os.path.isfile(spec.path), f"{spec.name}: file {spec.file} does not exist"
    bpf_c = os.path.join(config.ROOT, "bpf", f"{spec.name}.c")
    assert os.path.isfile(bpf_c), f"{spec.name}: bpf/{spec.name}.c does not exist"
    assert spec.description and spec.fields and spec.probes, f"{spec.name}: description, fields, probes"
    assert spec.chart.kind in ("timeseries", "histogram", "scatter", "stacks"), spec.chart.kind
    for more in spec.more_charts:     # the window's own further charts (the collector draws spec.chart)
        assert more.kind in ("timeseries", "histogram", "scatter", "heatmap"), f"{spec.name}: {more.kind}"
    assert spec.table_kind in ("row", "event"), f"{spec.name}: table_kind {spec.table_kind}"
    for arg in spec.args:
        assert arg.type in ("int", "float", "str", "choice", "flag"), f"{spec.name}.{arg.name}: type {arg.type}"
        if arg.type == "choice":
            assert arg.default is None or arg.default in arg.choices, f"{spec.name}.{arg.name}: default"
        if arg.default is not None:
            try:
                arg.convert(arg.default)
            except config.BadValue as exc:
                pytest.fail(f"{spec.name}.{arg.name}: its default is invalid: {exc}")
    assert spec.doc and os.path.isfile(os.path.join(config.ROOT, spec.doc)), f"{spec.name}: doc page {spec.doc!r} missing"


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_help_works_without_root(spec, unprivileged_copy):
    script = unprivileged_copy / spec.file
    cmd = ["/usr/bin/python3", str(script), "--help"]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{spec.name}: --help failed: {result.stderr[-500:]}"
    assert "usage:" in result.stdout and "examples:" in result.stdout, f"{spec.name}: --help lacks examples"


def sample_values(spec):
    values = {}
    for arg in spec.args:
        value = arg.sample if arg.sample is not None else arg.default
        if arg.type == "flag":
            value = True
        if value is not None:
            values[arg.name] = value
    return values


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_declared_args_are_accepted(spec):
    values = sample_values(spec)
    argv = spec.command(values, python=sys.executable) + ["--validate-args"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{spec.name}: script refused its declared args {argv[2:]}: {result.stderr}"
    parsed = json.loads(result.stdout)
    for arg in spec.args:
        assert arg.name in parsed, f"{spec.name}: declared arg {arg.name!r} is not an argument of the script"
        if arg.name in values and arg.type != "flag":
            assert str(parsed[arg.name]) == str(values[arg.name]) or float(parsed[arg.name]) == float(
                values[arg.name]), f"{spec.name}.{arg.name}: script read {parsed[arg.name]!r}"
        if arg.type == "flag":
            assert parsed[arg.name] is True, f"{spec.name}.{arg.name}: flag {arg.flag} not understood"


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_the_scripts_parser_is_its_entry_and_nothing_else(spec):
    """One declaration per argument: every option of the script's parser is an Arg of its entry, with
    the entry's flags, default and choices, and the script declares none of its own."""
    with open(spec.path) as f:
        assert "add_argument" not in f.read(), f"{spec.name}: declare arguments in registry/entries/{spec.name}.py, not the script"
    result = subprocess.run([sys.executable, spec.path, "--list-args"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{spec.name}: --list-args failed: {result.stderr[-500:]}"
    parsed: dict = {}
    for option in json.loads(result.stdout):
        parsed.setdefault(option["dest"], []).append(option)
    declared = {arg.name: arg for arg in spec.args}
    assert set(parsed) == set(declared), f"{spec.name}: parser {sorted(parsed)} vs entry {sorted(declared)}"
    for arg in spec.args:
        main, *shortcuts = parsed[arg.name]
        assert main["flags"] == list(arg.flags), f"{spec.name}.{arg.name}: flags {main['flags']}"
        if arg.flag is not None:       # a positional's default is applied by the harness's rule
            expected = False if arg.type == "flag" else arg.default
            assert main["default"] == expected, f"{spec.name}.{arg.name}: default {main['default']!r}"
        assert main["choices"] == (list(arg.choices) if arg.type == "choice" else None), arg.name
        assert [(o["flags"], o["const"]) for o in shortcuts] == \
            [(list(c.flags), c.value) for c in arg.shortcuts], f"{spec.name}.{arg.name}: shortcuts"


def test_doc_pages_and_readme_say_what_the_registry_declares():
    """Each metric page's options table and README's metric table are those scripts/gen_docs.py writes
    from the entries (the options from the parser the harness builds)."""
    result = subprocess.run([sys.executable, os.path.join(config.ROOT, "scripts", "gen_docs.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def not_recorded_by_the_tool(spec, first_line: str) -> list[str]:
    """Why a sample's first line is not the meta record the harness writes for this metric ([] when it
    is): a hand-written sample lacks the running kernel, the probes attached and their types, the
    script's pid and the arguments it ran with, which bcctool.Tool.meta() always writes."""
    try:
        meta = json.loads(first_line)
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("kind") != "meta" or meta.get("metric") != spec.name:
        return [f"the first line is not a meta record of {spec.name}"]
    problems = []
    missing = [key for key in HARNESS_META if key not in meta]
    if missing:
        problems.append(f"the meta record lacks {', '.join(missing)}")
    if meta.get("schema") not in range(1, RECORD_SCHEMA + 1):
        problems.append(f"schema {meta.get('schema')!r} is no record schema (1..{RECORD_SCHEMA})")
    if not re.fullmatch(r"\d+\.\d+\S*", str(meta.get("kernel", ""))):
        problems.append(f"kernel {meta.get('kernel')!r} is not a kernel release")
    if not (isinstance(meta.get("pid"), int) and meta["pid"] > 0):
        problems.append(f"pid {meta.get('pid')!r} is not a process id")
    probes = meta.get("probes")
    if not (isinstance(probes, list) and probes and all(
            isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"] and p.get("type") in PROBE_TYPES
            for p in probes)):
        problems.append(f"probes {probes!r} is not a list of the probes attached ({{name, type}}, type one of "
                        f"{', '.join(PROBE_TYPES)})")
    args, declared = meta.get("args"), {arg.name for arg in spec.args}
    # an option added since the sample was recorded is absent from it; one the entry lacks is not the tool's
    if not (isinstance(args, dict) and args and set(args) <= declared):
        problems.append(f"args {args!r} are not arguments the entry declares")
    return problems


def captured_runs(spec, page: str) -> list[list[str]]:
    """The page's fenced blocks that open with a command running the metric's script (`sudo .venv/bin/python
    metrics/NAME.py 1 3`, `$ ` before it or not) and go on with at least two lines it printed."""
    command = re.compile(rf"^(\$ )?(sudo )?(\S*python3? )?(\./)?metrics/{re.escape(spec.name)}\.py\b")
    runs = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", page, re.S | re.M):
        lines = [line for line in block.splitlines() if line.strip()]
        if lines and command.match(lines[0]) and len(lines) >= 3:
            runs.append(lines)
    return runs


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_the_sample_was_recorded_by_the_tool(spec):
    path = os.path.join(SAMPLES, f"{spec.name}.ndjson")
    assert os.path.isfile(path), f"{spec.name}: record real output into tests/samples/{spec.name}.ndjson"
    with open(path) as f:
        first = f.readline()
    problems = not_recorded_by_the_tool(spec, first)
    assert not problems, (f"{spec.name}: tests/samples/{spec.name}.ndjson is not the tool's own output "
                          f"({'; '.join(problems)}): record it with `sudo .venv/bin/python {spec.file} 1 2 --json`")


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_the_doc_page_shows_captured_output(spec):
    with open(os.path.join(config.ROOT, spec.doc)) as f:
        page = f.read()
    assert captured_runs(spec, page), (f"{spec.name}: {spec.doc} shows no captured run: a fenced block with the "
                                       f"command (`sudo .venv/bin/python {spec.file} 1 3`) and what it printed")


def test_a_hand_written_sample_is_refused():
    spec = config.get("sysnest")
    with open(os.path.join(SAMPLES, "sysnest.ndjson")) as f:
        real = json.loads(f.readline())
    assert not_recorded_by_the_tool(spec, json.dumps(real)) == []
    written = {"metric": "sysnest", "ts": 1.0, "kind": "meta", "interval": 0}
    assert not_recorded_by_the_tool(spec, json.dumps(written)) == [
        "the meta record lacks schema, kernel, pid, probes, filters, variant, args",
        "schema None is no record schema (1..1)", "kernel None is not a kernel release",
        "pid None is not a process id", "probes None is not a list of the probes attached ({name, type}, type one "
        "of tracepoint, raw_tracepoint, kprobe, perf_event)", "args None are not arguments the entry declares"]
    for bad, why in [({"kernel": "linux"}, "kernel 'linux'"), ({"pid": 0}, "pid 0"), ({"probes": []}, "probes []"),
                     ({"probes": [{"name": "raw_syscalls:sys_enter"}]}, "probes [{'name'"),
                     ({"args": {"interval": 1.0, "verbose": True}}, "args {'interval': 1.0, 'verbose': True}"),
                     ({"metric": "offcpu"}, "the first line is not a meta record of sysnest")]:
        problems = not_recorded_by_the_tool(spec, json.dumps({**real, **bad}))
        assert len(problems) == 1 and problems[0].startswith(why), (bad, problems)
    summary = '{"metric":"sysnest","ts":1.0,"kind":"summary","interval":1,"syscalls":3}'
    assert not_recorded_by_the_tool(spec, summary) == ["the first line is not a meta record of sysnest"]
    assert not_recorded_by_the_tool(spec, "sysnest output\n") == ["the first line is not a meta record of sysnest"]


def test_a_page_without_captured_output_is_refused():
    spec = config.get("sysnest")
    run = "```\nsudo .venv/bin/python metrics/sysnest.py 1 1\nTracing syscalls...\nPID  COMM  COUNT\n```\n"
    assert captured_runs(spec, f"# sysnest\n\nProse.\n\n{run}") == [run.splitlines()[1:4]]
    assert captured_runs(spec, "# sysnest\n\n$ sudo .venv/bin/python metrics/sysnest.py 1 1\n") == []  # not a block
    assert captured_runs(spec, "```\nsudo .venv/bin/python metrics/sysnest.py 1 1\n```\n") == []  # no output
    assert captured_runs(spec, run.replace("sysnest.py", "offcpu.py")) == []     # another metric's run
    assert captured_runs(spec, "```\nPID  COMM  COUNT\n1  init  3\n4  sh  5\n```\n") == []   # output of no command


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_parser_reads_recorded_output(spec):
    path = os.path.join(SAMPLES, f"{spec.name}.ndjson")
    assert os.path.isfile(path), f"{spec.name}: record real output into tests/samples/{spec.name}.ndjson"
    with open(path) as f:
        lines = f.read().splitlines()
    records = [spec.output_parser(line) for line in lines]
    records = [r for r in records if r is not None]
    assert records, f"{spec.name}: the parser found no records in the sample"
    assert records[0]["kind"] == "meta", f"{spec.name}: the first record must be meta"
    assert all(r["metric"] == spec.name for r in records)
    table = [r for r in records if r["kind"] == spec.table_kind]
    assert table, f"{spec.name}: no {spec.table_kind} records in the sample"
    names = {f.name for f in spec.fields}
    seen = set().union(*(r.keys() for r in table))
    assert names <= seen, f"{spec.name}: declared fields never appear: {sorted(names - seen)}"
    chart = spec.chart
    if chart.kind in ("timeseries", "scatter"):
        charted = [r for r in records if r["kind"] == chart.record_kind]
        assert charted and all(chart.y in r for r in charted), f"{spec.name}: chart field {chart.y} missing"
    if chart.kind == "histogram":
        assert any(r["kind"] == "hist" for r in records), f"{spec.name}: histogram chart but no hist records"
    for more in spec.more_charts:
        charted = [r for r in records if r["kind"] == more.record_kind
                   and (more.record_kind != "hist" or r.get("name") == more.series)]
        assert charted, f"{spec.name}: a {more.kind} chart of {more.record_kind} records {more.series or ''} but none"
        for field in [f for f, _ in more.lines] or [more.y] if more.record_kind != "hist" else []:
            assert all(field in r for r in charted), f"{spec.name}: chart field {field} missing"
        if more.per:
            assert all(r.get(more.per) for r in charted), f"{spec.name}: no {more.per} to divide by"


def test_parser_ignores_non_records():
    assert config.parse_ndjson("WARNING: something") is None
    assert config.parse_ndjson("{not json") is None
    assert config.parse_ndjson('{"kind": "row"}') is None
    assert config.parse_ndjson('[1, 2]') is None


def test_bad_values_are_refused_with_reason():
    spec = config.get("sysnest")
    _, errors = spec.validate({"top": "abc", "group_by": "nope", "interval": "-1"})
    assert set(errors) == {"top", "group_by", "interval"}
    with pytest.raises(ValueError):
        spec.command({"top": "0"})


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
def test_the_form_the_script_and_the_helper_refuse_a_value_alike(spec):
    """One converter, Arg.convert: a value under an option's minimum is refused with the same reason by
    the form (MetricSpec.validate), the script's parser and the privilege helper's."""
    from host.privhelper import Refused, parse_metric_args

    arg = [a for a in spec.args if a.flag and a.type in ("int", "float") and (a.minimum or 0) > 0][-1]
    reason = f"must be at least {arg.minimum:g}"
    assert spec.validate({arg.name: "0"})[1] == {arg.name: f"{arg.name} {reason}"}
    result = subprocess.run([sys.executable, spec.path, arg.flag, "0", "--validate-args"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and f"{arg.flag}: {reason} (see --help)" in result.stderr, result.stderr
    with pytest.raises(Refused, match=f"^{spec.name}: argument {arg.flag}: {reason}$"):
        parse_metric_args(spec, [arg.flag, "0"])


@pytest.mark.parametrize("spec", config.METRICS, ids=IDS)
@pytest.mark.parametrize("bad", [["--pid", "abc"], ["--no-such-option"], ["0"], ["1", "-3"]])
def test_bad_arguments_exit_2_with_one_line(spec, bad):
    if bad[0] == "--pid" and not any(a.flag == "--pid" for a in spec.args):
        bad = ["--no-such-option"]
    if bad[0] in ("0", "1") and not any(a.flag is None for a in spec.args):
        bad = ["--bogus"]
    result = subprocess.run([sys.executable, spec.path, *bad], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, f"{spec.name} {bad}: exit {result.returncode}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], f"{spec.name} {bad}: {result.stderr!r}"
    assert "Traceback" not in result.stderr
