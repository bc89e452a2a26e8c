"""No raw field name reaches a label: for every metric of the registry, over its real recorded output
(tests/samples), the window's table headers and headline, the dashboard's records table headers and
column chooser, and the terminal's key figure (headless progress) read the fields' labels in words
(total_us is "Total (ms)", never "total_us" or "total us"), with units scaled to the values."""

from __future__ import annotations

import html
import json
import os
import re
from urllib.parse import urlencode

import pytest
from collector_payloads import ours
from helpers import SAMPLES
from PySide6.QtCore import Qt

import config
from gui.metric_tab import MetricTab


def _sample(name: str) -> list[dict]:
    with open(os.path.join(SAMPLES, f"{name}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _raw_names(spec: config.MetricSpec, records: list[dict]) -> set[str]:
    """Every declared field's name, and every field name the records carry."""
    return {f.name for f in (*spec.fields, *spec.summary)} | {k for r in records for k in r}


def _assert_words(labels: list[str], raw: set[str], where: str) -> None:
    assert labels, where
    for label in labels:
        assert "_" not in label, f"{where}: {label!r} is a raw name"
        words = re.split(r"[\s(]", label)
        assert words[0] not in raw, f"{where}: {label!r} starts with the raw name {words[0]!r}"


@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_no_raw_field_name_reaches_a_label(spec, qtbot, collector_client):
    records = _sample(spec.name)
    raw = _raw_names(spec, records)

    # the window: the table's headers for the rows it shows, and the headline of each interval
    tab = MetricTab(spec)
    qtbot.addWidget(tab)
    tab.feed(records)
    tab.refresh()
    headers = [tab.model.headerData(i, Qt.Orientation.Horizontal) for i in range(tab.model.columnCount())]
    _assert_words(headers, raw, "window table")
    for summary in (r for r in records if r["kind"] == "summary"):
        parts = spec.summary_text(summary, limit=100).split("  ·  ")
        _assert_words([re.sub(r"^[\d.,]+\S*\s*", "", p) or p for p in parts], raw, "window headline")

    # the dashboard: every field of every record as a column of the records table, and the chooser
    assert collector_client.post("/data", json=ours(0, source=spec.name, records=records)).status_code == 200
    every = sorted({k for r in records for k in r} - {"metric", "ts", "kind"})
    query = urlencode({"host": "lab-pc-01", "run_id": "run-a", "source": spec.name, "columns": ",".join(every)})
    page = collector_client.get(f"/stream?{query}").get_data(as_text=True)
    body = page.split('<table id="records"')[1].split("</table>")[0]
    headings = [html.unescape(h) for h in re.findall(r"<th[^>]*>([^<]*)</th>", body)]
    assert len(headings) == 3 + len(every)
    _assert_words(headings, raw, "dashboard table")
    chooser = page.split('id="column-chooser"')[1].split("</details>")[0]
    _assert_words([html.unescape(t).strip() for t in re.findall(r'name="columns" value="[^"]+"[^>]*>([^<]*)</label>',
                                                               chooser)], raw, "dashboard column chooser")

    # the terminal: headless progress prints each interval's key figure
    figures = [spec.key_figure_text(r) for r in records if r["kind"] == "summary"]
    _assert_words([re.sub(r"^[\d.,]+\s*", "", f) for f in figures], raw, "key figure")
