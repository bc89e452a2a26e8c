"""docs/grafana/profiler-dashboard.json: a Grafana dashboard that loads (schema version, panels laid out
on the 24-column grid, a query per target), whose every PromQL expression parses by Prometheus' own
parser (`promtool check rules` on a rules file made from them), and whose every metric name is one the
collector exports when the metrics' real recorded output (tests/samples) is posted to it."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess

import pytest
from collector_payloads import ours
from helpers import ROOT, SAMPLES
from server_fixtures import IN_CI

DASHBOARD = os.path.join(ROOT, "docs", "grafana", "profiler-dashboard.json")
PROVISIONING = os.path.join(ROOT, "docs", "grafana", "provisioning")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(not PROMTOOL and not IN_CI,
                                    reason="Debian's prometheus package is not installed (scripts/setup.sh)")
# Grafana's variables, as Grafana would put them in before sending a query
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$host": ".*"}
NAME = re.compile(r"\b((?:profiler|collector)_[a-z0-9_]+)")


def dashboard() -> dict:
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def expressions() -> list[str]:
    out = []
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            out.append(expr)
    return out


def promtool_rules(tmp_path, exprs: list[str]) -> subprocess.CompletedProcess:
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:panel_{i}", "expr": e}
                                                         for i, e in enumerate(exprs)]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # YAML is a superset of JSON
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_dashboard_is_a_grafana_dashboard():
    d = dashboard()
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    assert d["uid"] and d["title"] and d["panels"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["host"]["type"] == "query"
    for panel in d["panels"]:
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["type"] in ("timeseries", "stat", "table", "heatmap", "bargauge"), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"] and len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert all(t["expr"].strip() for t in panel["targets"])


def test_provisioning_files_point_at_the_dashboard():
    text = open(os.path.join(PROVISIONING, "dashboards", "profiler.yaml")).read()
    assert "apiVersion: 1" in text and "type: file" in text and "path:" in text
    text = open(os.path.join(PROVISIONING, "datasources", "prometheus.yaml")).read()
    assert "type: prometheus" in text


@needs_promtool
def test_every_panel_query_parses_with_promtool(tmp_path):
    checked = promtool_rules(tmp_path, expressions())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(expressions())} rules found" in checked.stdout
    # the check can fail: a broken expression is refused
    broken = promtool_rules(tmp_path, ["sum by (host (profiler_sysnest_syscalls_per_second)"])
    assert broken.returncode != 0


def test_every_metric_name_is_exported(collector_client):
    """Post each metric's real recorded output; every name the dashboard queries is then in /metrics."""
    for path in sorted(glob.glob(os.path.join(SAMPLES, "*.ndjson"))):
        source = os.path.basename(path)[:-len(".ndjson")]
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        reply = collector_client.post("/data", json=ours(0, source=source, records=records))
        assert reply.status_code == 200, (source, reply.get_json())
    exported = set(NAME.findall(collector_client.get("/metrics").get_data(as_text=True)))
    used = {n for e in expressions() for n in NAME.findall(e)}
    assert used and used - exported == set()
