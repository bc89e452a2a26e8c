"""A range dragged across the stream page's chart in a real headless browser (Chromium, as
test_server_flame_browser.py): the page comes back for that range (since/until from the chart's own
times), at its flame graph, which holds the stacks of the intervals inside the range only."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from collector_payloads import envelope, ours

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

T0 = 1_750_000_000.0


def _interval(i: int) -> list[dict]:
    """cpuprofile's interval i: process work with 10 * i samples in one stack named for the interval."""
    return [envelope("cpuprofile", T0 + 10 * i, i, "stack", pid=42, comm="work", count=10 * i,
                     frames=[{"name": "main", "module": "work", "kind": "user"},
                             {"name": f"step_{i}", "module": "work", "kind": "user"}]),
            envelope("cpuprofile", T0 + 10 * i + 0.01, i, "summary", frequency_hz=100, interval_s=10.0,
                     samples=10 * i)]


def test_a_range_dragged_on_the_chart_shows_its_flame_graph(served, browser):  # noqa: F811 - fixtures
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    base, client = served
    for i in range(1, 7):
        assert client.post("/data", json=ours(i - 1, source="cpuprofile", records=_interval(i))).status_code == 200
    browser.get(base + "/stream?host=lab-pc-01&run_id=run-a&source=cpuprofile&range=run")
    svg = browser.find_element(By.CSS_SELECTOR, "#chart-box svg.chart")
    x0, x1 = (float(svg.get_attribute(a)) for a in ("data-x0", "data-x1"))
    scale = svg.rect["width"] / 860                    # the chart's viewBox is 860 wide
    width = (x1 - x0) * scale
    # from 30 % to 70 % of the time axis: intervals 3 (T0+30) and 4 (T0+40) of 1..6 (T0+10 .. T0+60)
    start = (x0 - 430) * scale + 0.3 * width             # offsets from the element's centre
    ActionChains(browser).move_to_element_with_offset(svg, start, 0).click_and_hold() \
        .move_by_offset(0.4 * width, 0).release().perform()
    browser.find_element(By.ID, "flame-status")
    query = parse_qs(urlsplit(browser.current_url).query)
    since, until = float(query["since"][0]), float(query["until"][0])
    assert since == pytest.approx(T0 + 25, abs=1.0) and until == pytest.approx(T0 + 45, abs=1.0)
    assert urlsplit(browser.current_url).fragment == "flame"
    frames = set(browser.execute_script(
        "return Array.from(document.querySelectorAll('svg.flamegraph g.frame')).map(g => g.dataset.name)"))
    assert {"step_3", "step_4"} <= frames and not frames & {"step_1", "step_2", "step_5", "step_6"}
    # the range's samples, and their time at the run's frequency beside them
    assert re.search(r"\b70 samples( \([^)]*\))? in all", browser.find_element(By.ID, "flame-status").text)
