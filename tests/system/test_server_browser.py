"""The dashboard in a real headless browser: Chromium and chromedriver from the distro, driven by
Selenium, against the app served by waitress on a free local port. In CI a missing browser fails."""

from __future__ import annotations

import time

import pytest
from collector_payloads import original, ours

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

def test_dashboard_lists_streams_and_draws_the_chart(served, browser):  # browser quits first
    from selenium.webdriver.common.by import By

    base, client = served
    for seq in (0, 1, 2, 4):  # 3 is missing
        assert client.post("/data", json=ours(seq, host="lab-pc-07", run_id="run-browser")).status_code == 200
    assert client.post("/data", json=original(0, time.time() - 5)).status_code == 200

    browser.get(base + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#streams tbody tr")
    cells = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    assert len(cells) == 2, cells
    ours_row = next(c for c in cells if c[0] == "lab-pc-07")
    assert ours_row[1:6] == ["run-browser", "sysnest", "4", "8", "4"]
    assert ours_row[6].startswith("1: 3")
    legacy_row = next(c for c in cells if c[0] == "127.0.0.1")
    assert legacy_row[1].startswith("legacy-") and legacy_row[6] == "none"

    browser.find_element(By.XPATH, "//tr[td[@class='host' and text()='lab-pc-07']]//td[@class='source']/a").click()
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chart")
    assert chart.get_attribute("data-field") == "per_sec"
    box = browser.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", chart)
    assert box[0] > 200 and box[1] > 100
    line = chart.find_element(By.CSS_SELECTOR, "polyline.series")
    assert len(line.get_attribute("points").split()) == 4  # one point per summary record
    length = browser.execute_script("return arguments[0].getTotalLength();", line)
    assert length > 50  # drawn, not collapsed to a point
    assert len(browser.find_elements(By.CSS_SELECTOR, "table#records tbody tr")) == 8
