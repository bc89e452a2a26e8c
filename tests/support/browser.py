"""A real headless browser for the dashboard tests: Chromium and chromedriver from the distro, driven by
Selenium (`browser`), and the collector served by waitress on a free local port (`served`). In CI a
missing browser fails the test instead of skipping it."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

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


def problems(driver) -> list[str]:
    """Console errors and failed loads since the last call, and resources that answered 4xx/5xx."""
    logged = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    failed = driver.execute_script(
        "return performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))"
        ".filter(e => e.responseStatus >= 400).map(e => e.name + ' ' + e.responseStatus);")
    return logged + failed
