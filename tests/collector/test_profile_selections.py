"""Selections and diffs through /api/profile: a selection over two hosts is the sum of the two hosts'
profiles, repeated parameters mean "any of", cgroup and comm keep their records (SQLite and PostgreSQL),
format=json counts what was posted, a range is relative to the selection's newest record, and
/api/profile/diff gives each function's change of share between two runs of known shares (70/30
against 30/70) as JSON and as flamegraph.pl's differential input; a bad query is a 4xx with a JSON
reason that names what is wrong."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from stack_posts import cpu_stack, post_stacks

from profile_data import parse_folded

T0 = 1_750_000_000.0


def interval(i: int, t0: float, leaves: list[tuple[str, int, str, str]]) -> list[dict]:
    """One interval's stack records: (leaf, samples, comm, cgroup) each."""
    return [cpu_stack(t0 + 10 * i, i + 1, leaf, n, comm, cgroup) for leaf, n, comm, cgroup in leaves]


# per stream (host, run): its leaves per interval, 3 intervals 10 s apart from its start
LAB = {("pc-a", "r1", T0): [("fa", 10, "work", "/lab/a"), ("fb", 5, "other", "/lab/b")],
       ("pc-b", "r1", T0): [("fa", 3, "work", "/lab/a"), ("fc", 7, "work", "/lab/a/job")],
       ("pc-b", "r2", T0): [("fd", 4, "work", "/lab/c")],
       ("pc-c", "r1", T0 + 1000): [("fe", 1, "work", "/lab/ab")]}


@pytest.fixture
def lab(collector_client):
    for (host, run_id, t0), leaves in LAB.items():
        post_stacks(collector_client, host, run_id, [interval(i, t0, leaves) for i in range(3)])
    return collector_client


@pytest.fixture
def sqlite_lab(tmp_path):
    """The same lab on SQLite only (the tests of what is computed after the query)."""
    from collector import create_app

    app = create_app({"db_url": f"sqlite:///{tmp_path}/c.db"})
    client = app.test_client()
    for (host, run_id, t0), leaves in LAB.items():
        post_stacks(client, host, run_id, [interval(i, t0, leaves) for i in range(3)])
    yield client
    app.extensions["collector"].store.close()


def folded(client, query: str):
    answer = client.get(f"/api/profile?source=cpuprofile&{query}")
    assert answer.status_code == 200, answer.get_json()
    return parse_folded(answer.get_data(as_text=True), "samples")


def leaves(profile) -> dict[str, float]:
    found: dict[str, float] = {}
    for stack, weight in profile.stacks.items():
        found[stack[-1].name] = found.get(stack[-1].name, 0) + weight
    return found


def test_two_hosts_are_the_sum_of_each_and_repeats_mean_any_of(lab):
    a, b = folded(lab, "host=pc-a&run_id=r1"), folded(lab, "host=pc-b&run_id=r1")
    both = folded(lab, "host=pc-a&host=pc-b&run_id=r1")
    assert both == a.copy().merge(b) and both.total == 3 * (10 + 5 + 3 + 7)
    assert leaves(both) == {"fa": 39, "fb": 15, "fc": 21}
    assert folded(lab, "host=pc-a&host=pc-nowhere") == folded(lab, "host=pc-a")
    assert leaves(folded(lab, "host=pc-b&run_id=r1&run_id=r2")) == leaves(folded(lab, "host=pc-b")) \
        == {"fa": 9, "fc": 21, "fd": 12}
    assert leaves(folded(lab, "")) == {"fa": 39, "fb": 15, "fc": 21, "fd": 12, "fe": 3}  # every stream


def test_cgroup_and_comm_filters_keep_their_records(lab):
    assert leaves(folded(lab, "comm=other")) == {"fb": 15}
    assert leaves(folded(lab, "host=pc-a&comm=other&comm=work")) == {"fa": 30, "fb": 15}
    assert leaves(folded(lab, "cgroup=/lab/a")) == {"fa": 39}  # not /lab/a/job, nor /lab/ab
    assert leaves(folded(lab, "cgroup=/lab/a&cgroup_match=tree")) == {"fa": 39, "fc": 21}
    assert leaves(folded(lab, "cgroup=/lab/b&cgroup=/lab/c&comm=other")) == {"fb": 15}


def test_json_counts_the_posted_records_and_echoes_the_selection(sqlite_lab):
    answer = sqlite_lab.get("/api/profile?source=cpuprofile&host=pc-a&host=pc-b&run_id=r1&format=json")
    assert answer.status_code == 200 and answer.headers["X-Profile-Records"] == "12"
    body = answer.get_json()
    assert (body["total"], body["records"], body["streams"], body["truncated"]) == (75, 12, 2, False)
    assert body["selection"]["host"] == ["pc-a", "pc-b"] and body["selection"]["run_id"] == ["r1"]
    functions = {f["name"]: f for f in body["functions"]}
    assert functions["fa"]["self"] == functions["fa"]["total"] == 39
    assert functions["fa"]["self_pct"] == pytest.approx(100 * 39 / 75)
    assert functions["main"]["self"] == 0 and functions["main"]["total_pct"] == pytest.approx(100.0)
    assert [f["name"] for f in body["functions"]][:3] == ["fa", "fc", "fb"]  # by self weight


def test_ranges_are_relative_to_the_newest_record_of_the_selection(sqlite_lab):
    # pc-c's run is 1,000 s after pc-a's: its last 60 s hold none of pc-a's records
    assert leaves(folded(sqlite_lab, "host=pc-a&host=pc-c&range=60s")) == {"fe": 3}
    assert leaves(folded(sqlite_lab, "host=pc-a&range=15s")) == {"fa": 20, "fb": 10}
    # latest: each stream's own newest interval, summed
    assert leaves(folded(sqlite_lab, "host=pc-a&host=pc-c&range=latest")) == {"fa": 10, "fb": 5, "fe": 1}
    assert leaves(folded(sqlite_lab, f"since={T0 + 5}&until={T0 + 15}")) == {"fa": 13, "fb": 5, "fc": 7, "fd": 4}


def shares_run(client, run_id: str, a: int, b: int, intervals: int) -> None:
    post_stacks(client, "lab-d", run_id, [[cpu_stack(T0 + 10 * i, i + 1, "hot_a", a),
                                           cpu_stack(T0 + 10 * i, i + 1, "hot_b", b)] for i in range(intervals)])


def test_diff_gives_each_functions_change_of_share(sqlite_lab):
    shares_run(sqlite_lab, "R1", 70, 30, 5)    # 500 samples, 70/30
    shares_run(sqlite_lab, "R2", 60, 140, 3)   # 600 samples, 30/70: shares, not counts, compare
    base, target = quote("source=cpuprofile&run_id=R1"), quote("source=cpuprofile&host=lab-d&run_id=R2")
    answer = sqlite_lab.get(f"/api/profile/diff?base={base}&target={target}")
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    assert (body["base"]["total"], body["target"]["total"]) == (500, 600)
    assert [f["name"] for f in body["functions"]][:2] in (["hot_a", "hot_b"], ["hot_b", "hot_a"])
    changes = {f["name"]: f for f in body["functions"]}
    assert changes["hot_a"]["base_self_pct"] == pytest.approx(70) and changes["hot_a"]["target_self_pct"] == pytest.approx(30)
    assert changes["hot_a"]["change_pct"] == pytest.approx(-40) and changes["hot_b"]["change_pct"] == pytest.approx(40)
    assert changes["main"]["change_pct"] == pytest.approx(0) and changes["main"]["target_total_pct"] == pytest.approx(100)
    lines = sqlite_lab.get(f"/api/profile/diff?base={base}&target={target}&format=folded").get_data(as_text=True)
    # the base's counts scaled to the target's total (difffolded.pl -n), the target's as they are
    assert lines.splitlines() == ["work;main [work];hot_a [work] 420 180", "work;main [work];hot_b [work] 180 420"][::-1]


@pytest.mark.parametrize(("query", "status", "words"), [
    ("source=cpuprofile&sourc=x", 400, "sourc"),
    ("source=cpuprofile&cgroup=lab", 400, "cgroup"),
    ("source=cpuprofile&cgroup_match=tree", 400, "cgroup_match"),
    ("source=cpuprofile&host=" + "h" * 300, 400, "host"),
    ("source=cpuprofile&range=7x", 400, "range"),
    ("source=cpuprofile&since=9&until=8", 400, "since"),
    ("source=cpuprofile&format=xml", 400, "format"),
    ("source=cpuprofile&source=offcpu", 400, "source"),
    ("host=pc-a", 400, "source"),
    ("source=nope", 404, "nope"),
])
def test_bad_selection_is_4xx_with_a_json_reason(sqlite_lab, query, status, words):
    answer = sqlite_lab.get(f"/api/profile?{query}")
    assert answer.status_code == status and answer.is_json, answer.data[:200]
    assert answer.get_json()["reason"] == ("bad_query" if status == 400 else "not_found")
    assert words in answer.get_json()["detail"]


@pytest.mark.parametrize(("query", "status", "detail"), [
    ("target=source%3Dcpuprofile", 400, "base: required"),
    ("base=source%3Dcpuprofile&target=source%3Dcpuprofile%26bogus%3D1", 400, "target: unknown parameter(s): bogus"),
    ("base=host%3Dpc-a&target=source%3Dcpuprofile", 400, "base: source"),
    ("base=source%3Dcpuprofile&target=source%3Dcpuprofile%26range%3Dsoon", 400, "target: range"),
    ("base=source%3Dnope&target=source%3Dcpuprofile", 404, "base: no stream"),
    ("base=source%3Dcpuprofile&target=source%3Dnope", 404, "target: no stream"),
    # both sides bad: the base's failure is the answer, as when the base was read before the target was parsed
    ("base=source%3Dnope&target=source%3Dcpuprofile%26range%3Dsoon", 404, "base: no stream"),
    ("base=source%3Dnope&target=source%3Dnope2", 404, "base: no stream"),
    ("base=source%3Dcpuprofile&target=source%3Dcpuprofile&format=svg", 400, "format"),
    ("base=source%3Dcpuprofile&target=source%3Dcpuprofile&side=x", 400, "side"),
])
def test_bad_diff_side_is_named(sqlite_lab, query, status, detail):
    answer = sqlite_lab.get(f"/api/profile/diff?{query}")
    assert answer.status_code == status and answer.is_json, answer.data[:200]
    assert detail in answer.get_json()["detail"]
