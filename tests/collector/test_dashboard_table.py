"""The stream page's table over the metrics' real recorded output (tests/samples): the fields the registry
declares come first, every other field is one click away in the column chooser, and a stack reads as its
frames, innermost first, not as JSON."""

from __future__ import annotations

import html
import json
import os
import re

import pytest
from collector_payloads import ours
from helpers import SAMPLES

from collector import table

KEY = "host=lab-pc-01&run_id=run-a"


def _post_sample(client, metric: str) -> list[dict]:
    with open(os.path.join(SAMPLES, f"{metric}.ndjson")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    assert client.post("/data", json=ours(0, source=metric, records=records)).status_code == 200
    return records


def _table(page: str) -> tuple[list[str], list[list[str]]]:
    """(the headings, each row's cells as HTML) of the records table."""
    body = page.split('<table id="records"')[1].split("</table>")[0]
    headings = [html.unescape(h) for h in re.findall(r"<th[^>]*>([^<]*)</th>", body)]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr><td class=\"time\".*?</tr>", body, re.S)]
    return headings, rows


def test_tcpconnlat_shows_latency_and_status(collector_client):
    records = _post_sample(collector_client, "tcpconnlat")
    fields = {k for r in records for k in r} - {"metric", "ts", "kind"}
    assert len(fields) > table.TABLE_COLUMNS   # meta and summary records bring more fields than are shown
    page = collector_client.get(f"/stream?{KEY}&source=tcpconnlat").get_data(as_text=True)
    headings, rows = _table(page)
    # the fields by their labels, the latencies (all under 1 ms) in µs
    assert "Latency (µs)" in headings and "Status" in headings
    events = [r for r in records if r["kind"] == "event"]
    latency = [row[headings.index("Latency (µs)")] for row in rows if row[2] == "event"]
    status = [row[headings.index("Status")] for row in rows if row[2] == "event"]
    assert sorted(float(v) for v in latency) == pytest.approx(sorted(e["latency_ms"] * 1000 for e in events), abs=0.05)
    assert sorted(status) == sorted(e["status"] for e in events)

    # the chooser lists every field; asking for two shows those two, kept on the next page's links
    chooser = page.split('id="column-chooser"')[1].split("</details>")[0]
    assert set(re.findall(r'name="columns" value="([^"]+)"', chooser)) == fields
    page = collector_client.get(f"/stream?{KEY}&source=tcpconnlat&columns=status&columns=args").get_data(as_text=True)
    headings, _rows = _table(page)
    assert headings == ["Time (UTC)", "Sequence", "Kind", "Status", "Arguments"]   # the declared field first
    every_kind = re.search(r'class="kinds">kind: <a href="([^"]+)">all</a>', page).group(1)
    assert _table(collector_client.get(html.unescape(every_kind)).get_data(as_text=True))[0] == headings


def test_stack_columns_read_as_frames(collector_client):
    records = _post_sample(collector_client, "offcpu")
    stack = next(r for r in records if r.get("kernel_frames"))
    page = collector_client.get(f"/stream?{KEY}&source=offcpu&kind=row&columns=comm,kernel_frames,user_frames"
                                ).get_data(as_text=True)
    headings, rows = _table(page)
    assert headings[3:] == ["Command", "Kernel stack (innermost first)", "User stack (innermost first)"]
    cells = [row[headings.index("Kernel stack (innermost first)")] for row in rows]
    assert cells and not [c for c in cells if '["' in html.unescape(c)]   # no stack cell is JSON
    listed = {tuple(html.unescape(f) for f in re.findall(r"<li>(.*?)</li>", c)): c for c in cells}
    shown = listed[tuple(stack["kernel_frames"])]                        # every frame, innermost first
    line = html.unescape(re.search(r"<summary>(.*?)</summary>", shown).group(1))
    assert line == " ← ".join(stack["kernel_frames"][:table.STACK_LINE]) + f" ← … ({len(stack['kernel_frames'])} frames)"


def test_cpuprofile_frames_read_innermost_first():
    frames = [{"name": "_start", "module": "serve", "kind": "user"}, {"name": "main", "module": "serve"},
              {"name": "work", "module": ""}]
    cell = table.cell("frames", frames)
    assert cell.frames == ("work", "main [serve]", "_start [serve]")
    assert cell.text == "work ← main [serve] ← _start [serve]"
    assert table.cell("folded", "python;a;b").frames == ("b", "a", "python")
    assert table.cell("args", {"pid": 1}).text == '{"pid":1}' and not table.cell("args", {"pid": 1}).frames
