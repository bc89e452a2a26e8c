"""The tab's "Group by cgroup" toggle (gui/cgroup_groups.py): one row per cgroup, its processes and the
sums of the additive columns of the rows the table holds, one level of a nested table only."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import Qt

import config
from gui import cgroup_groups
from gui.metric_tab import MetricTab

SYSNEST = config.get("sysnest")
PAGEFAULT = config.get("pagefault")


def fields(spec) -> list[tuple[str, str, str]]:
    return [(f.name, f.label, f.unit) for f in spec.fields]


def sysnest_rows() -> list[dict]:
    """Two processes in /lab/a (one of them in two syscalls), one in /lab/b: group rows hold each
    process's totals, detail rows its syscalls (which must not be added again)."""
    rows = []
    for pid, path, calls in ((100, "/lab/a", {"getppid": (30, 3.0, 0.5), "read": (10, 2.0, 0.9)}),
                             (101, "/lab/a", {"getppid": (5, 1.0, 0.4)}),
                             (200, "/lab/b", {"write": (7, 7.0, 2.5)})):
        common = {"metric": "sysnest", "ts": 1.0, "kind": "row", "interval": 1, "pid": pid, "comm": f"w{pid}",
                  "cgroup_id": hash(path) & 0xFFFF, "cgroup": path}
        rows.append({**common, "level": "group", "count": sum(c for c, _, _ in calls.values()),
                     "total_us": sum(t for _, t, _ in calls.values()),
                     "avg_us": 0.1, "max_us": max(m for _, _, m in calls.values()), "errors": 1})
        rows += [{**common, "level": "detail", "syscall": name, "count": c, "total_us": t, "avg_us": t / c,
                  "max_us": m, "errors": 0} for name, (c, t, m) in calls.items()]
    return rows


def test_columns_sum_counts_and_times_take_the_max_of_maxima_and_leave_averages_and_ids_out():
    assert cgroup_groups.how("count", "count") == "sum" and cgroup_groups.how("total_us", "us") == "sum"
    assert cgroup_groups.how("max_us", "us") == "max" and cgroup_groups.how("minor_per_sec", "/s") == "sum"
    for name, unit in (("avg_us", "us"), ("avg_lat_us", "us"), ("p99_us", "us"), ("min_ms", "ms"),
                       ("pid", ""), ("cgroup_id", ""), ("comm", ""), ("cgroup", "")):
        assert cgroup_groups.how(name, unit) is None, name
    for spec in config.METRICS:     # no identifier or average of any registered metric is ever summed
        for key, _, _unit in cgroup_groups.columns(fields(spec))[3:]:
            assert not key.startswith("avg") and key not in ("pid", "tid", "cgroup_id", "priority"), (spec.name, key)


def test_a_nested_table_sums_its_group_rows_only():
    groups = {g["cgroup"]: g for g in cgroup_groups.aggregate(sysnest_rows(), fields(SYSNEST))}
    assert groups["/lab/a"] == {**groups["/lab/a"], "processes": 2, "rows": 2, "count": 45, "total_us": 6.0,
                                "max_us": 0.9, "errors": 2}
    assert groups["/lab/b"] == {**groups["/lab/b"], "processes": 1, "rows": 1, "count": 7, "total_us": 7.0,
                                "max_us": 2.5, "errors": 1}
    assert "avg_us" not in groups["/lab/a"] and "pid" not in groups["/lab/a"]
    # grouped by syscall (group rows carry no cgroup): the per-process detail rows are summed instead
    by_syscall = [r for r in sysnest_rows() if r["level"] == "detail"] + [
        {"level": "group", "syscall": "getppid", "count": 35, "kind": "row"}]
    groups = {g["cgroup"]: g for g in cgroup_groups.aggregate(by_syscall, fields(SYSNEST))}
    assert (groups["/lab/a"]["count"], groups["/lab/a"]["processes"], groups["/lab/b"]["count"]) == (45, 2, 7)


def feed(tab: MetricTab, rows: list[dict]) -> None:
    tab.feed([{"metric": tab.name, "ts": 0.5, "kind": "meta", "interval": 0, "pid": 1}, *rows])
    tab.refresh()


def shown(tab: MetricTab) -> dict[str, dict[str, str]]:
    proxy = tab.cgroup_proxy
    headers = [proxy.headerData(c, Qt.Orientation.Horizontal) for c in range(proxy.columnCount())]
    return {proxy.index(r, 0).data(): {h: proxy.index(r, c).data() for c, h in enumerate(headers)}
            for r in range(proxy.rowCount())}


def test_the_toggle_shows_a_row_per_cgroup_and_the_filter_and_double_click_work_on_it(qtbot):
    tab = MetricTab(SYSNEST)
    qtbot.addWidget(tab)
    feed(tab, sysnest_rows())
    assert tab.group_by_cgroup.isVisibleTo(tab) and tab.views.currentWidget() is tab.tree
    tab.group_by_cgroup.setChecked(True)
    assert tab.views.currentWidget() is tab.cgroup_table
    rows = shown(tab)
    assert list(rows) == ["/lab/a", "/lab/b"]   # the larger count first
    assert (rows["/lab/a"]["Processes"], rows["/lab/a"]["Count"], rows["/lab/b"]["Count"]) == ("2", "45", "7")
    # the next interval replaces the sums
    feed(tab, [{**r, "interval": 2, "count": r["count"] * 2} for r in sysnest_rows()])
    assert shown(tab)["/lab/a"]["Count"] == "90"
    header, exported = tab.table_export()     # the CSV export writes what is shown: the groups
    assert header[:3] == ["Cgroup", "Processes", "Rows"] and [r[:2] for r in exported] == [["/lab/a", 2], ["/lab/b", 1]]
    tab.filter_box.setText("lab/b")
    assert list(shown(tab)) == ["/lab/b"]
    tab.filter_box.clear()
    tab._open_cgroup(tab.cgroup_proxy.index(0, 0))
    assert not tab.group_by_cgroup.isChecked() and tab.filter_box.text() == "/lab/a"
    assert tab.views.currentWidget() is tab.tree
    tab.group_by_cgroup.setChecked(True)
    tab.show_process(100)             # a drilled process shows its rows, whatever the grouping
    assert tab.views.currentWidget() is tab.table
    tab.show_process(None)
    assert tab.views.currentWidget() is tab.cgroup_table


def test_a_flat_table_sums_its_rows(qtbot):
    tab = MetricTab(PAGEFAULT)
    qtbot.addWidget(tab)
    rows = [{"metric": "pagefault", "ts": 1.0, "kind": "row", "interval": 1, "pid": pid, "comm": "x",
             "cgroup_id": 1, "cgroup": path, "minor": minor, "major": major, "minor_per_sec": minor / 2.0,
             "major_per_sec": major / 2.0, "total_per_sec": (minor + major) / 2.0}
            for pid, path, minor, major in ((1, "/j1", 1000, 2), (2, "/j1", 24, 0), (3, "/j2", 5, 1))]
    tab.group_by_cgroup.setChecked(True)
    feed(tab, rows)
    rows = shown(tab)
    assert (rows["/j1"]["Minor"], rows["/j1"]["Major"], rows["/j1"]["Processes"]) == ("1,024", "2", "2")  # minor: a count, as declared
    assert (rows["/j2"]["Minor"], rows["/j2"]["Processes"]) == ("5", "1")


@pytest.mark.parametrize("name", ["netpack", "schparm"])
def test_no_toggle_where_rows_carry_no_cgroup(qtbot, name):
    # every registered metric's rows carry a cgroup now: the entry without its cgroup column
    spec = config.get(name)
    tab = MetricTab(dataclasses.replace(spec, fields=tuple(f for f in spec.fields if f.name != "cgroup")))
    qtbot.addWidget(tab)
    assert not tab.group_by_cgroup.isVisibleTo(tab)
