"""The stream page's flame graph in a real headless browser (Chromium, as test_server_browser.py): it
renders with the posted stacks' frames at their shares, a click zooms, a search highlights and gives
the share, the top functions beside it follow both, a function clicked opens its sandwich (callers
above, callees below, its butterfly table), bottom-up and the scheduler toggle are a click away, and
the pages log no console error and load nothing that answers 404."""

from __future__ import annotations

import pytest
from browser import problems
from stack_posts import post_intervals, sample

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

PAGE = "/stream?host=lab-pc-01&run_id=run-a&source=offcpu&range=run"


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
    scheduler = {"__schedule", "schedule", "schedule_timeout", "schedule_hrtimeout_range_clock"}
    for record in stacks:  # every frame of every posted stack is drawn, up to where it blocked
        for frame in record["kernel_frames"] + [f.split(" [")[0] for f in record["user_frames"]] + [record["comm"]]:
            assert (frame in boxes) == (frame not in scheduler), frame
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


def top_functions(driver) -> list[str]:
    return [a.text for a in driver.find_elements("css selector", "#top-functions tbody td:first-child a")]


def test_views_top_functions_sandwich_bottom_up_and_toggles(served, browser, tmp_path):  # noqa: F811 - fixtures
    from selenium.webdriver.common.by import By

    base, client = served
    post_intervals(client, "offcpu", sample("offcpu"), 2)
    browser.get(base + PAGE)
    assert top_functions(browser)[0] == "do_epoll_wait"       # where threads blocked, not __schedule
    # the top functions follow a zoom on a process frame
    browser.find_element(By.CSS_SELECTOR, "svg.flamegraph g.frame[data-name='rcu_preempt']").click()
    assert top_functions(browser)[0] == "rcu_gp_fqs_loop" and "do_epoll_wait" not in top_functions(browser)
    browser.find_element(By.ID, "flame-reset").click()
    # a function clicked: its sandwich, callers drawn above it and its butterfly beside
    next(a for a in browser.find_elements(By.CSS_SELECTOR, "#top-functions a") if a.text == "do_epoll_wait").click()
    graphs = browser.find_elements(By.CSS_SELECTOR, "svg.flamegraph")
    assert len(graphs) == 2
    callers = {g.get_attribute("data-name"): g.find_element(By.TAG_NAME, "rect").rect["y"]
               for g in graphs[0].find_elements(By.CSS_SELECTOR, "g.frame")}
    assert callers["__x64_sys_epoll_wait"] < callers["do_epoll_wait"]     # above it on the page
    rows = [r.text.split()[:2] for r in browser.find_elements(By.CSS_SELECTOR, "#butterfly tbody tr")]
    assert rows == [["caller", "__x64_sys_epoll_wait"], ["self", "do_epoll_wait"]]
    browser.save_screenshot(str(tmp_path / "sandwich.png"))
    # a caller clicked in the sandwich: that function's sandwich
    graphs[0].find_element(By.CSS_SELECTOR, "g.frame[data-name='__x64_sys_epoll_wait']").click()
    assert "callers and callees of __x64_sys_epoll_wait" in browser.find_element(By.ID, "butterfly").text
    # bottom-up: the blocking sites on the top row
    browser.find_element(By.CSS_SELECTOR, "#flame-views a[data-view='bottom_up']").click()
    frames = browser.find_elements(By.CSS_SELECTOR, "svg.flamegraph g.frame")
    top_row = min(f.find_element(By.TAG_NAME, "rect").rect["y"] for f in frames)
    assert "do_epoll_wait" in {f.get_attribute("data-name") for f in frames
                               if f.find_element(By.TAG_NAME, "rect").rect["y"] == top_row}
    # the scheduler's frames on request, from the toggle
    browser.find_element(By.ID, "toggle-scheduler").click()
    assert "__schedule" in {f.get_attribute("data-name")
                            for f in browser.find_elements(By.CSS_SELECTOR, "svg.flamegraph g.frame")}
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
