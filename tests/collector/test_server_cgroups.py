"""The records' cgroup as a query: /api/records?cgroup=PATH (that group, or with cgroup_match=tree that
group and every group below it) and the stream page's cgroup filter, each on SQLite and on a real
PostgreSQL (server_fixtures.py)."""

from __future__ import annotations

import json

import pytest
from collector_payloads import envelope, ours

T0 = 1_760_000_000.0
# where each test record ran: nested groups, a sibling whose name extends another's, names with the
# characters SQL LIKE and JSON treat specially, a group gone (''), and records with no cgroup at all
GROUPS = ["/lab/a", "/lab/a/job1", "/lab/a/job1/t", "/lab/ab", "/lab/b", "/", "/lab/50%_x", '/lab/q"uote',
          "/lab/ünï", ""]


def post(client, payload):
    reply = client.post("/data", data=json.dumps(payload), content_type="application/json")
    assert reply.status_code == 200, reply.get_json()


def row(i: int, cgroup: str | None) -> dict:
    fields = {"pid": 1000 + i, "comm": f"w{i}", "count": i}
    if cgroup is not None:
        fields.update(cgroup_id=5000 + i, cgroup=cgroup)
    return envelope("sysnest", T0 + i, i, "row", **fields)


@pytest.fixture
def loaded(collector_client):
    """Three rows per group, a row without a cgroup, and a meta record that names /lab/a only in its
    filters (nested: not the record's own cgroup), over two streams."""
    records = [envelope("sysnest", T0 - 1, 0, "meta", filters={"cgroup": "/lab/a"}, args={"cgroup": "/lab/a"})]
    records += [row(3 * g + k, path) for g, path in enumerate(GROUPS) for k in range(3)]
    records.append(row(999, None))
    half = len(records) // 2
    post(collector_client, ours(0, records=records[:half]))
    post(collector_client, ours(1, records=records[half:]))
    post(collector_client, ours(0, run_id="run-b", records=[row(2000, "/lab/a"), row(2001, "/lab/b")]))
    return collector_client


def cgroups_of(client, **query) -> list[str]:
    reply = client.get("/api/records", query_string={"limit": 1000, **query})
    assert reply.status_code == 200, reply.get_json()
    return [r["record"].get("cgroup") for r in reply.get_json()["records"]]


def test_exact_cgroup_is_that_group_only(loaded):
    assert cgroups_of(loaded, cgroup="/lab/a") == ["/lab/a"] * 4  # three of run-a, one of run-b
    assert cgroups_of(loaded, cgroup="/lab/a", run_id="run-a") == ["/lab/a"] * 3
    assert cgroups_of(loaded, cgroup="/lab/a/", cgroup_match="exact", run_id="run-b") == ["/lab/a"]
    assert cgroups_of(loaded, cgroup="/") == ["/"] * 3
    assert cgroups_of(loaded, cgroup="/lab/nothing") == []


def test_special_characters_match_themselves_only(loaded):
    for path in ("/lab/50%_x", '/lab/q"uote', "/lab/ünï"):
        assert cgroups_of(loaded, cgroup=path) == [path] * 3, path
    assert cgroups_of(loaded, cgroup="/lab/50%", cgroup_match="tree") == []  # % is no wildcard
    assert cgroups_of(loaded, cgroup="/lab/5__%_x") == []


def test_tree_is_the_group_and_every_group_below(loaded):
    got = cgroups_of(loaded, cgroup="/lab/a", cgroup_match="tree", run_id="run-a")
    assert got == ["/lab/a"] * 3 + ["/lab/a/job1"] * 3 + ["/lab/a/job1/t"] * 3  # not /lab/ab
    assert cgroups_of(loaded, cgroup="/lab/a/job1", cgroup_match="tree") == ["/lab/a/job1"] * 3 + ["/lab/a/job1/t"] * 3
    # the root's tree: every record that carries a group ('' is a group gone: none)
    expected = sorted([g for g in GROUPS if g for _ in range(3)] + ["/lab/a", "/lab/b"])
    assert sorted(cgroups_of(loaded, cgroup="/", cgroup_match="tree")) == expected


def test_cgroup_combines_with_the_other_filters(loaded):
    rows = loaded.get("/api/records", query_string={"cgroup": "/lab/a", "cgroup_match": "tree", "kind": "row",
                                                    "since": T0 + 4, "until": T0 + 7}).get_json()["records"]
    assert [(r["record"]["cgroup"], r["ts"]) for r in rows] == [("/lab/a/job1", T0 + 4), ("/lab/a/job1", T0 + 5),
                                                                 ("/lab/a/job1/t", T0 + 6), ("/lab/a/job1/t", T0 + 7)]


def test_cursor_pages_through_a_cgroup(loaded):
    """Two records a page: every page holds only the group's records and the pages together hold all."""
    seen, cursor, pages = [], None, 0
    while True:
        query = {"cgroup": "/lab/a", "cgroup_match": "tree", "limit": 2, **({"cursor": cursor} if cursor else {})}
        body = loaded.get("/api/records", query_string=query).get_json()
        seen += [(r["record"]["cgroup"], r["record"]["pid"]) for r in body["records"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 6
    expected = cgroups_of(loaded, cgroup="/lab/a", cgroup_match="tree")
    assert [c for c, _pid in seen] == expected and len({pid for _c, pid in seen}) == len(expected) == 10


def test_ndjson_and_csv_are_filtered_too(loaded):
    text = loaded.get("/api/records", query_string={"format": "ndjson", "cgroup": "/lab/b"}).get_data(as_text=True)
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["record"]["cgroup"] for line in lines] == ["/lab/b"] * 4
    csv_text = loaded.get("/api/records", query_string={"format": "csv", "cgroup": "/lab/b",
                                                        "run_id": "run-b"}).get_data(as_text=True)
    assert len(csv_text.strip().splitlines()) == 2 and "/lab/b" in csv_text


@pytest.mark.parametrize("query, reason", [
    ({"cgroup": "lab/a"}, "'/' first"),
    ({"cgroup": "/lab/\x01"}, "'/' first"),
    ({"cgroup": "/" + "x" * 5000}, "'/' first"),
    ({"cgroup": "/lab/a", "cgroup_match": "prefix"}, "exact or tree"),
    ({"cgroup_match": "tree"}, "needs a cgroup"),
    ({"cgroups": "/lab/a"}, "unknown parameter"),
])
def test_bad_cgroup_query_is_a_400_with_a_reason(loaded, query, reason):
    for url in ("/api/records", "/stream"):
        reply = loaded.get(url, query_string={"host": "lab-pc-01", "run_id": "run-a", "source": "sysnest", **query})
        assert reply.status_code == 400, (url, reply.status_code)
        body = reply.get_json()
        assert body["reason"] == "bad_query" and reason in body["detail"], body


def test_stream_page_filters_its_table_by_cgroup(loaded):
    key = {"host": "lab-pc-01", "run_id": "run-a", "source": "sysnest"}
    page = loaded.get("/stream", query_string=key).get_data(as_text=True)
    assert 'id="cgroup-filter"' in page
    assert 'class="cgroup-link">/lab/a/job1</a>' in page  # the groups the newest records carry, as links
    page = loaded.get("/stream", query_string={**key, "cgroup": "/lab/a", "cgroup_match": "tree"}).get_data(as_text=True)
    table = page.split('id="records"', 1)[1].split("</table>", 1)[0]
    cells = [c for c in ("/lab/a/job1/t", "/lab/a/job1", "/lab/ab", "/lab/b") if f">{c}<" in table]
    assert cells == ["/lab/a/job1/t", "/lab/a/job1"] and table.count("<tr>") == 1 + 9
    assert 'id="clear-cgroup"' in page and 'value="tree" selected' in page
    everything = page.split('id="clear-cgroup"', 1)[0].rsplit('href="', 1)[1].split('"', 1)[0]
    assert everything.startswith("/stream?") and "cgroup" not in everything
    # the kind links and the export keep the filter
    assert "cgroup=/lab/a&amp;cgroup_match=tree" in page.split('class="kinds"', 1)[1].split("</p>", 1)[0]
    page = loaded.get("/stream", query_string={**key, "cgroup": "/lab/a"}).get_data(as_text=True)
    table = page.split('id="records"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 1 + 3  # the meta record names /lab/a in its filters only: not shown
    # the form sent with its box empty: no filter (its select's value alone is no mistake), and no link carries it
    reply = loaded.get("/stream", query_string={**key, "cgroup": "", "cgroup_match": "exact"})
    assert reply.status_code == 200
    page = reply.get_data(as_text=True)
    assert page.split('id="records"', 1)[1].split("</table>", 1)[0].count("<tr>") == 1 + 32
    assert "cgroup_match" not in page.split('class="kinds"', 1)[1].split("</p>", 1)[0]


def stacks_in(path: str, fn: str, count: int, ts: float) -> dict:
    return {"metric": "cpuprofile", "ts": ts, "kind": "stack", "interval": 1, "pid": 42, "comm": "work",
            "cgroup_id": 7, "cgroup": path, "count": count,
            "frames": [{"name": "main", "module": "work", "kind": "user"}, {"name": fn, "module": "work", "kind": "user"}]}


@pytest.fixture
def profiled(collector_client):
    """cpuprofile stacks of three groups, each its own leaf function and sample count."""
    records = [stacks_in("/lab/a", "in_a", 30, T0), stacks_in("/lab/a/job1", "in_job1", 20, T0 + 1),
               stacks_in("/lab/ab", "in_ab", 10, T0 + 2)]
    post(collector_client, ours(0, source="cpuprofile", run_id="run-p", records=records))
    return collector_client


def folded(client, **query) -> dict[str, int]:
    reply = client.get("/api/profile", query_string={"host": "lab-pc-01", "run_id": "run-p", "source": "cpuprofile",
                                                     "range": "run", **query})
    assert reply.status_code == 200, reply.get_json()
    return {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in reply.get_data(as_text=True).splitlines()}


def stack(fn: str) -> str:
    return f"work;main [work];{fn} [work]"  # folded: the comm, then each frame with its module


def test_profile_of_a_cgroup_is_its_stacks_only(profiled):
    assert folded(profiled) == {stack("in_a"): 30, stack("in_job1"): 20, stack("in_ab"): 10}
    assert folded(profiled, cgroup="/lab/a") == {stack("in_a"): 30}
    assert folded(profiled, cgroup="/lab/a", cgroup_match="tree") == {stack("in_a"): 30, stack("in_job1"): 20}
    reply = profiled.get("/api/profile", query_string={"host": "lab-pc-01", "run_id": "run-p", "source": "cpuprofile",
                                                       "cgroup": "lab"})
    assert reply.status_code == 400 and "'/' first" in reply.get_json()["detail"]


def test_stream_page_flame_graph_follows_the_cgroup_filter(profiled):
    key = {"host": "lab-pc-01", "run_id": "run-p", "source": "cpuprofile", "range": "run"}
    page = profiled.get("/stream", query_string={**key, "cgroup": "/lab/a", "cgroup_match": "tree"}).get_data(as_text=True)
    flame = page.split('id="flame"', 1)[1].split("</section>", 1)[0]
    assert "in_a" in flame and "in_job1" in flame and "in_ab" not in flame
    assert 'id="flame-cgroup">/lab/a</code> and below' in flame
    # the exports, the range links and the search form keep the filter
    exports = [href for href in flame.split('href="')[1:] if href.startswith("/api/profile")]
    assert exports and all("cgroup=/lab/a&amp;cgroup_match=tree" in href.split('"', 1)[0] for href in exports)
    assert '<input type="hidden" name="cgroup" value="/lab/a">' in flame
    page = profiled.get("/stream", query_string={**key, "cgroup": "/lab/ab"}).get_data(as_text=True)
    flame = page.split('id="flame"', 1)[1].split("</section>", 1)[0]
    assert "in_ab" in flame and "in_a<" not in flame and "in_job1" not in flame
