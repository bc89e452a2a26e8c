"""The dashboard in a real headless browser: Chromium and chromedriver from the distro, driven by
Selenium, against the app served by waitress on a free local port. In CI a missing browser fails."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
from collector_payloads import original, ours

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROME_ARGS = ("--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")


@pytest.fixture
def browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        message = f"{', '.join(missing)} not installed (scripts/apt-packages.txt: chromium, chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # with both paths given, Selenium downloads nothing
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console messages, for get_log
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def served(tmp_path):
    """The collector on SQLite (the pages are the same on PostgreSQL, see test_server.py), served by
    waitress in a thread; yields (base URL, test client)."""
    import waitress

    from collector import create_app

    app = create_app({"db_url": f"sqlite:///{tmp_path}/browser.db"})
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}", app.test_client()
    finally:
        server.close()  # the loop ends once no channel is left (the browser has quit by now)
        thread.join(timeout=10)
        server.task_dispatcher.shutdown()
        app.extensions["collector"].store.close()
        assert not thread.is_alive()


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
