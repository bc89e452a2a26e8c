"""The terminal's tables read like the window's (registry/units.py through bcctool.table): for every
metric, its declared fields rendered over synthetic rows whose values span the sizes real ones take
head their columns in words (never a raw field name), each column of times in one unit its heading
names, sizes in B/KiB/MiB/GiB, rates with /s, and every cell, read back, is its value in that unit. And
each metric script builds its tables from its entry's declarations (tool.fields), not by hand."""

from __future__ import annotations

import ast
import re

import pytest

import bcctool
import config
from bcctool.formatting import columns
from registry import units
from registry.spec import COMMON_FIELDS

# values of each kind of unit, from small to large, in the declared unit
TIMES = (3.0, 894.1, 500_608.0, 12_692_078.0)
SIZES = (512, 4_096, 1_500, 61_997_056, 5_000_000_000)
RATES = (0.5, 741.0, 12_345.6)
NUMBERS = {"count": (0, 12, 1_234_567), "pct": (0.0, 42.5, 100.0), "hz": (49, 99, 999), "id": (1, 185, 4_194_304)}
TEXT = ("a", "python3 (server.py)", "/system.slice/ssh.service")
SIZE_STEPS = {s: 1024 ** i for i, s in enumerate(units.SIZES)}


def values_for(field: config.Field) -> tuple:
    base, rate = units.per_second(field.unit)
    if base in units.TIMES:
        return TIMES
    if base == "bytes":
        return SIZES
    if rate:
        return RATES
    if units.is_identifier(field.name, field.unit):
        return NUMBERS["id"]
    return NUMBERS.get(field.unit, TEXT)


def synthetic_rows(fields: tuple[config.Field, ...]) -> list[dict]:
    """Rows that take each field's values in turn, so every column holds its small and large values."""
    table = {f.name: values_for(f) for f in fields}
    return [{name: values[i % len(values)] for name, values in table.items()} for i in range(5)]


def read_back(cell: str) -> tuple[float, float]:
    """(the number a cell shows, half a unit of its last digit: how far rounding may have moved it)."""
    text = cell.replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text), 0.5 * 10 ** -decimals


def check_column(field: config.Field, column, values: list, raw: set[str]) -> None:
    heading, shown = column.heading, column.shown
    # in words: no snake_case, and not a field's name, whatever follows it
    assert "_" not in heading and re.split(r"[\s(]", heading)[0] not in raw, heading
    base, rate = units.per_second(field.unit)
    if rate and base != "bytes":   # a size per second says so in each cell (59.1 MiB/s)
        assert heading.endswith("/s") or heading.endswith("/s)"), heading
    if base in units.TIMES:
        # one unit for the column, the one its heading names, and every cell a number in it
        to, _ = units.per_second(shown)
        assert to in units.TIMES and heading.endswith(f"({units.symbol(shown)})"), (heading, shown)
        largest = max(values) * units.TIMES[base] / units.TIMES[to]
        assert 1 <= largest < units.COLUMN_DIGITS or to == "s", (heading, largest)   # the unit its largest reads in
        for value, cell in zip(values, column.cells, strict=True):
            number, slack = read_back(cell)
            assert number == pytest.approx(units.convert(value, base, to), abs=slack * 1.0001), (heading, value, cell)
    elif base == "bytes":
        # a size carries its own unit, scaled to its size (4.0 KiB, 59.1 MiB, 4.7 GiB)
        assert "(" not in heading, heading
        for value, cell in zip(values, column.cells, strict=True):
            m = re.fullmatch(r"([\d.]+) (B|KiB|MiB|GiB|TiB)(/s)?", cell)
            assert m and bool(m.group(3)) == rate, (heading, cell)
            number, slack = read_back(m.group(1))
            assert 1 <= number < 1024 or value < 1, (heading, cell)
            assert number * SIZE_STEPS[m.group(2)] == pytest.approx(value, abs=slack * SIZE_STEPS[m.group(2)] * 1.0001)
    elif isinstance(values[0], (int, float)):
        if field.unit == "pct":
            assert "%" in heading, heading
        for value, cell in zip(values, column.cells, strict=True):
            number, slack = read_back(cell)
            assert number == pytest.approx(value, abs=slack * 1.0001), (heading, value, cell)


def tables_of(spec: config.MetricSpec) -> list[tuple[config.Field, ...]]:
    """Its table fields, and its summary's (what the terminal's summary lines show)."""
    return [tuple(spec.field(f.name) for f in spec.fields), tuple(spec.field(f.name, "summary") for f in spec.summary)]


@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_every_declared_field_reads_in_words_in_one_unit_per_column(spec):
    raw = {f.name for f in (*spec.fields, *spec.summary, *COMMON_FIELDS)}
    for fields in tables_of(spec):
        rows = synthetic_rows(fields)
        cols = columns(fields, rows)
        for field, column in zip(fields, cols, strict=True):
            check_column(field, column, [r[field.name] for r in rows], raw)
        # the printed table: its heading line and one line per row, every cell in its column
        lines = bcctool.table(fields, rows).splitlines()
        assert re.split(r"\s{2,}", lines[0].strip()) == [c.heading for c in cols]
        assert [re.split(r"\s{2,}", line.strip()) for line in lines[1:]] == [list(cells) for cells in
                                                                             zip(*(c.cells for c in cols), strict=True)]


def test_a_scripts_time_unit_is_every_time_columns():
    """sysnest -m: every time column in ms, whatever its values."""
    spec = config.get("sysnest")
    fields = tuple(spec.field(n) for n in ("syscall", "count", "total_us", "avg_us", "max_us"))
    rows = synthetic_rows(fields)
    cols = columns(fields, rows, time_unit="ms")
    assert [c.heading for c in cols] == ["Syscall", "Count", "Total (ms)", "Avg (ms)", "Max (ms)"]
    assert [c.cells for c in cols[2:]] == [tuple(units.number(r[f.name] / 1000) for r in rows) for f in fields[2:]]


# where a field name can be, in an argument of tool.fields(...): not in a condition, a key or an index
_PARTS = {ast.Tuple: lambda n: n.elts, ast.List: lambda n: n.elts, ast.Starred: lambda n: [n.value],
          ast.IfExp: lambda n: [n.body, n.orelse], ast.Subscript: lambda n: [n.value], ast.Dict: lambda n: n.values}


def table_field_names(source: str) -> set[str]:
    """The field names a script passes to tool.fields(...): the strings of its arguments, through
    tuples, conditional expressions, dict values and module-level names (not the conditions' strings)."""
    tree = ast.parse(source)
    assigned = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                assigned.update({n.id: node.value for n in ast.walk(target) if isinstance(n, ast.Name)})
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "fields"]
    pending, names = [arg for call in calls for arg in call.args], set()
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
        elif isinstance(node, ast.Name):
            pending += [assigned[node.id]] if node.id in assigned else []
        else:
            pending += _PARTS.get(type(node), lambda n: [])(node)
    return names


# columns a script shows that its entry does not declare: their labels are guessed from the name
GUESSED = {"pagefault": {"time", "traps_per_sec"}}


@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_each_script_heads_its_tables_with_its_entrys_declarations(spec):
    with open(spec.path) as f:
        names = table_field_names(f.read())
    assert names, f"{spec.file} builds no table from tool.fields(...)"
    declared = {f.name for f in (*spec.fields, *spec.summary, *COMMON_FIELDS)}
    assert names - declared == GUESSED.get(spec.name, set())
    for name in names:
        label = spec.field(name).label
        assert "_" not in label and label.split()[0] != name, (name, label)


def test_the_field_name_reader_follows_names_and_skips_conditions():
    source = ('WHO = ("pid", "comm") if args.group_by == "process" else ("cgroup",)\n'
              'A, B = {"x": (("syscall",), ("count",))}["x"]\n'
              'COLUMNS = tool.fields(*WHO, *A, *(("traps",) if args.traps else ()), "total_us", kind="summary")\n')
    assert table_field_names(source) == {"pid", "comm", "cgroup", "syscall", "count", "traps", "total_us"}
