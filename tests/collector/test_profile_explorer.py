"""The profile explorer page (/profiles) through the app: linked from the overview; a selection draws its
merged flame graph and top functions; "compare with" draws the differential flame graph (a frame that
grew red, one that shrank blue, by its change of share) and the functions by change, as the diff API
gives them; the page's links hold the whole state (a form's URL, its permalink, a zoom, a swap all read
back to what they show); a bad query is a 400, a selection no stream matches a 404 that keeps the form."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from stack_posts import cpu_stack, post_stacks

T0 = 1_750_000_000.0


@pytest.fixture
def client(tmp_path):
    """Two runs on pc-a, 70/30 then 30/70 between hot_a and hot_b (the second twice as long), and
    pc-b's run of the first kind (SQLite: the page is the same on PostgreSQL, the queries are the API's)."""
    from collector import create_app

    app = create_app({"db_url": f"sqlite:///{tmp_path}/c.db"})
    client = app.test_client()
    for host, run_id, a, b, n, t0 in (("pc-a", "R1", 70, 30, 3, T0), ("pc-a", "R2", 30, 70, 6, T0 + 100),
                                      ("pc-b", "R1", 70, 30, 3, T0)):
        post_stacks(client, host, run_id, [[cpu_stack(t0 + 10 * i, i + 1, "hot_a", a),
                                            cpu_stack(t0 + 10 * i, i + 1, "hot_b", b)] for i in range(n)])
    yield client
    app.extensions["collector"].store.close()


def page(client, query: str) -> str:
    answer = client.get(f"/profiles?{query}")
    assert answer.status_code == 200, answer.data[:300]
    return answer.get_data(as_text=True)


def link(text: str, element_id: str) -> str:
    found = re.search(rf'<a href="([^"]*)" id="{element_id}">', text)
    assert found, element_id
    return html.unescape(found.group(1))


def frames(text: str) -> dict[str, tuple[float | None, str]]:
    """Each drawn frame: its change of share (None: not differential) and its fill."""
    return {name: (float(change) if change else None, fill) for name, change, fill in re.findall(
        r'<g class="frame" data-name="([^"]*)" data-kind="[^"]*"(?: data-change="([^"]*)")?><title>[^<]*</title>'
        r'<rect [^>]*fill="([^"]*)"', text)}


def state(url: str) -> list[tuple[str, str]]:
    return sorted(parse_qsl(urlsplit(url).query))


def test_overview_links_the_explorer_and_its_form_lists_the_metrics_hosts_and_runs(client):
    assert 'href="/profiles"' in client.get("/").get_data(as_text=True)
    assert 'value="cpuprofile"' in page(client, "")
    form = page(client, "source=cpuprofile")
    assert re.findall(r'name="host" value="([^"]*)"', form) == ["pc-a", "pc-b"]
    assert re.findall(r'name="run_id" value="([^"]*)"', form) == ["R1", "R2"]
    assert 'name="base_host" value="pc-b"' in form and 'id="compare-on"' in form


def test_a_selection_draws_its_merged_flame_graph_and_top_functions(client):
    text = page(client, "source=cpuprofile&run_id=R1")
    drawn = frames(text)
    assert {"work", "main", "hot_a", "hot_b"} <= drawn.keys() and drawn["hot_a"][0] is None
    assert "2 stream(s)" in text and "600 samples in all" in text   # pc-a's and pc-b's R1
    rows = re.findall(r'<tr data-name="([^"]*)"><td[^>]*>[^<]*</td><td class="num">([^<]*)</td>'
                      r'<td class="num">([^<]*)</td>', text.split('id="top-functions"')[1])
    assert rows[:2] == [("hot_a", "420 samples", "70.0"), ("hot_b", "180 samples", "30.0")]


def test_compare_draws_the_differential_and_the_functions_by_change(client):
    text = page(client, "source=cpuprofile&host=pc-a&run_id=R2&compare=on&base_host=pc-a&base_run_id=R1")
    drawn = frames(text)
    assert drawn["hot_a"][0] == pytest.approx(-40) and drawn["hot_b"][0] == pytest.approx(40)
    assert drawn["hot_a"][1] == "rgb(35,35,255)" and drawn["hot_b"][1] == "rgb(255,35,35)"  # saturated: the strongest
    assert drawn["main"] == (0.0, "rgb(235,235,235)")
    table = text.split('id="functions-by-change"')[1]
    assert re.findall(r'<tr data-name="([^"]*)" data-change="([^"]*)">', table)[:3] == \
        [("hot_a", "-40.000"), ("hot_b", "40.000"), ("main", "0.000")]
    diff = client.get(link(text, "diff-json")).get_json()
    assert {f["name"]: round(f["change_pct"], 3) for f in diff["functions"]} == {"hot_a": -40, "hot_b": 40, "main": 0}


def test_the_url_holds_the_whole_state_and_its_links_read_back(client):
    # as the form sends it: empty boxes and all
    form_url = ("/profiles?source=cpuprofile&host=pc-a&run_id=R2&cgroup=/lab/a&cgroup=&comm=&range=&since=&until="
                "&compare=on&base_host=pc-a&base_run_id=R1&base_cgroup=&base_comm=&base_range=run&base_since="
                "&base_until=&search=hot")
    text = page(client, form_url.split("?", 1)[1])
    permalink = link(text, "permalink")
    assert state(permalink) == sorted([("source", "cpuprofile"), ("host", "pc-a"), ("run_id", "R2"),
                                       ("cgroup", "/lab/a"), ("compare", "on"), ("base_host", "pc-a"),
                                       ("base_run_id", "R1"), ("base_range", "run"), ("search", "hot")])
    again = page(client, urlsplit(permalink).query)
    assert frames(again) == frames(text) and link(again, "permalink") == permalink
    # the form shows the state it came from
    assert re.search(r'name="base_run_id" value="R1" checked', again) and 'value="/lab/a"' in again
    assert re.search(r'name="run_id" value="R2" checked', again) and not re.search(r'name="run_id" value="R1" checked', again)
    assert re.findall(r'<option value="([^"]*)" selected>', again) == ["cpuprofile", "run", "run"]
    # a zoom keeps everything and adds its path; reset goes back
    zoom = html.unescape(re.search(r'<a href="([^"]*focus=work%3Bmain[^"]*)">', text).group(1))
    zoomed = page(client, urlsplit(zoom).query)
    assert state(zoom) == sorted([*state(permalink), ("focus", "work;main [work]")])
    assert link(zoomed, "flame-reset") == permalink
    # swapping the two sides swaps every change's sign
    swapped = page(client, urlsplit(link(text, "swap")).query)
    assert frames(swapped)["hot_a"][0] == pytest.approx(40)


@pytest.mark.parametrize(("query", "status"), [("source=cpuprofile&compare=yes", 400),
                                               ("source=cpuprofile&range=soon", 400),
                                               ("source=cpuprofile&compare=on&base_cgroup=lab", 400),
                                               ("source=cpuprofile&sorce=x", 400),
                                               ("source=cpuprofile&host=pc-zz", 404),
                                               ("source=cpuprofile&compare=on&base_run_id=R9", 404)])
def test_bad_explorer_query(client, query, status):
    answer = client.get(f"/profiles?{query}", headers={"Accept": "text/html"})
    assert answer.status_code == status
    if status == 404:
        assert 'id="explorer-form"' in answer.get_data(as_text=True)   # the form stays, to pick again
