"""The stream page's flame graph in a real headless browser (Chromium, as test_server_browser.py): it
renders with the posted stacks' frames at their shares, a click zooms, a search highlights and gives
the share, and the pages log no console error and load nothing that answers 404."""

from __future__ import annotations

import pytest
from stack_posts import post_intervals, sample

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

PAGE = "/stream?host=lab-pc-01&run_id=run-a&source=offcpu&range=run"


def problems(driver) -> list[str]:
    """Console errors and failed loads since the last call, and resources that answered 4xx/5xx."""
    logged = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    failed = driver.execute_script(
        "return performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))"
        ".filter(e => e.responseStatus >= 400).map(e => e.name + ' ' + e.responseStatus);")
    return logged + failed


def frame_boxes(driver) -> dict[str, list[float]]:
    """Each drawn frame's name -> its box [x, width] in page pixels (the widest when a name repeats)."""
    return driver.execute_script("""
        const out = {};
        for (const g of document.querySelectorAll('svg.flamegraph g.frame')) {
            const r = g.querySelector('rect').getBoundingClientRect();
            const name = g.dataset.name;
            if (!out[name] || out[name][1] < r.width) out[name] = [r.x, r.width];
        }
        return out;""")


def test_stream_page_flame_graph_renders_zooms_and_searches(served, browser):  # noqa: F811 - fixtures
    from selenium.webdriver.common.by import By

    base, client = served
    posted = post_intervals(client, "offcpu", sample("offcpu"), 3)
    stacks = [r for r in posted if r.get("level") == "stack"]
    total = sum(r["total_ms"] for r in stacks)
    browser.get(base + PAGE)
    svg = browser.find_element(By.CSS_SELECTOR, "svg.flamegraph")
    graph_width = svg.rect["width"]
    assert graph_width > 800
    boxes = frame_boxes(browser)
    for record in stacks:  # every frame of every posted stack is drawn
        for frame in record["kernel_frames"] + [f.split(" [")[0] for f in record["user_frames"]] + [record["comm"]]:
            assert frame in boxes, frame
    python_ms = sum(r["total_ms"] for r in stacks if r["comm"] == "python")
    assert boxes["python"][1] == pytest.approx(python_ms / total * graph_width, abs=2)

    # a click on the python frame zooms: it spans the whole graph, the other processes are gone
    browser.find_element(By.CSS_SELECTOR, "svg.flamegraph g.frame[data-name='python']").click()
    browser.find_element(By.ID, "flame-reset")
    zoomed = frame_boxes(browser)
    assert zoomed["python"][1] == pytest.approx(graph_width, abs=2)
    assert "rcu_preempt" not in zoomed
    browser.find_element(By.ID, "flame-reset").click()
    assert "rcu_preempt" in frame_boxes(browser)

    # a search highlights the matching frames and says their share
    field = browser.find_element(By.CSS_SELECTOR, "#flame-search input[name=search]")
    field.send_keys("epoll")
    field.submit()
    match = browser.find_element(By.ID, "flame-match").text
    epoll_ms = sum(r["total_ms"] for r in stacks if any("epoll" in f for f in r["kernel_frames"] + r["user_frames"]))
    assert f"{epoll_ms / total * 100:.1f} %" in match
    highlighted = browser.find_elements(By.CSS_SELECTOR, "svg.flamegraph rect[fill='rgb(230,0,230)']")
    assert highlighted and all(
        "epoll" in h.find_element(By.XPATH, "..").get_attribute("data-name").lower() for h in highlighted)
    assert problems(browser) == []


def test_open_in_speedscope_shows_the_range_offline(served, browser):  # noqa: F811 - fixtures
    """The stream page's link opens speedscope's own viewer, served by the collector from the npm
    package setup installed, on the range's speedscope export: it draws it, with no request leaving
    the collector and no console error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, client = served
    post_intervals(client, "offcpu", sample("offcpu"), 2)
    browser.get(base + PAGE)
    browser.find_element(By.ID, "open-speedscope").click()
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(
        "return document.title.includes('offcpu') && document.querySelectorAll('canvas').length > 0"))
    # speedscope draws the frame names into its canvas; the profile it loaded names them
    names = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any("/api/profile?" in n and "format=speedscope" in n for n in names)
    assert all(n.startswith(base) for n in names), names
    assert problems(browser) == []
