"""The lab overview and a stream page in a real headless browser (Chromium + Selenium): axis labels
drawn whole inside the chart (the 1.034e+05 case), the range picker changes what is shown, quiet hosts
stand out, the page refreshes itself without a reload, and nothing logs a console error or a 404."""

from __future__ import annotations

import time

import pytest
from collector_payloads import envelope, ours

from collector import dashboard

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

KEY = "host=lab-pc-07&run_id=run-b&source=sysnest"


def post_summaries(client, values, t0: float, step: float = 1.0, host: str = "lab-pc-07") -> None:
    records = [envelope("sysnest", t0 + i * step, i + 1, "summary", syscalls=int(v), per_sec=v, processes=1,
                        errors=0, interval_s=step) for i, v in enumerate(values)]
    for start in range(0, len(records), 500):
        reply = client.post("/data", json=ours(start // 500, host=host, run_id="run-b", records=records[start:start + 500]))
        assert reply.status_code == 200


def console_problems(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE" or "404" in e["message"]]


def test_axis_labels_are_whole_inside_the_chart(served, browser):
    from selenium.webdriver.common.by import By

    base, client = served
    post_summaries(client, [98_000.0, 103_400.0, 101_000.0, 99_500.0], time.time() - 10)
    browser.get(f"{base}/stream?{KEY}")
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chart")
    boxes = browser.execute_script(
        "return Array.from(arguments[0].querySelectorAll('text.ytick, text.xtick')).map(t => {"
        " const b = t.getBBox(); return [t.getAttribute('class'), t.textContent, b.x, b.x + b.width]; });", chart)
    ys = [b for b in boxes if b[0] == "ytick"]
    xs = [b for b in boxes if b[0] == "xtick"]
    assert len(ys) >= 4 and len(xs) >= 3, boxes
    width = float(chart.get_attribute("width"))
    assert all(0 <= left and right <= width for _c, _t, left, right in boxes), boxes  # nothing cut off
    top = ys[-1][1]
    assert top.endswith("k") and float(top[:-1]) * 1000 >= 103_400, ys         # the title says /s
    assert console_problems(browser) == []


def test_range_picker_changes_what_is_shown(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, client = served
    now = time.time()
    post_summaries(client, [float(100 + i) for i in range(120)], now - 120 * 60, step=60.0)  # 2 h, one a minute

    def points() -> int:
        line = browser.find_element(By.CSS_SELECTOR, "svg.chart polyline.series")
        return len(line.get_attribute("points").split())

    browser.get(f"{base}/stream?{KEY}")
    assert points() == 120
    browser.find_element(By.CSS_SELECTOR, "a.range[data-range='5m']").click()
    WebDriverWait(browser, 20).until(lambda b: "range=5m" in b.current_url)
    assert browser.find_element(By.CSS_SELECTOR, "b.current").get_attribute("data-range") == "5m"
    WebDriverWait(browser, 20).until(lambda b: points() == 6)  # the newest and the 5 minutes before it
    browser.find_element(By.CSS_SELECTOR, "a.range[data-range='1h']").click()
    WebDriverWait(browser, 20).until(lambda b: points() == 61)
    # custom: 20 minutes in the middle, typed in the picker's UTC fields
    since, until = now - 90 * 60, now - 70 * 60
    for field, ts in (("since-local", since), ("until-local", until)):
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
        browser.execute_script("arguments[0].value = arguments[1];", browser.find_element(By.ID, field), text)
    browser.find_element(By.ID, "apply-range").click()
    # the form's GET navigates: wait for the new page rather than read the old one
    WebDriverWait(browser, 20).until(lambda b: "since=" in b.current_url)
    WebDriverWait(browser, 20).until(lambda b: points() in (20, 21))
    shown = [float(td.text) for td in browser.find_elements(By.XPATH, "//table[@id='records']/tbody/tr/td[9]")
             if td.text]
    assert shown and all(100 + 29 <= v <= 100 + 51 for v in shown), shown      # per_sec of those intervals only
    # the records table sorts by a click on a heading, numbers as numbers
    browser.find_element(By.XPATH, "//table[@id='records']//th[text()='Syscalls/s']").click()   # per_sec
    ordered = [float(td.text) for td in browser.find_elements(By.XPATH, "//table[@id='records']/tbody/tr/td[9]")]
    assert ordered == sorted(ordered)
    assert console_problems(browser) == []


def test_overview_marks_quiet_hosts_and_refreshes_without_reload(served, browser, monkeypatch):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    monkeypatch.setattr(dashboard, "QUIET_S", 2)          # the app runs in this process (served)
    base, client = served
    post_summaries(client, [10.0, 20.0], time.time() - 5, host="pc-quiet")
    time.sleep(2.5)
    post_summaries(client, [30.0, 40.0], time.time() - 2, host="pc-busy")
    browser.get(base + "/")
    cards = {c.get_attribute("data-host"): c for c in browser.find_elements(By.CSS_SELECTOR, ".host-card")}
    assert "quiet" in cards["pc-quiet"].get_attribute("class") and "quiet" not in cards["pc-busy"].get_attribute("class")
    assert browser.find_elements(By.CSS_SELECTOR, ".host-card.quiet .badge")
    colour = browser.execute_script("return getComputedStyle(arguments[0]).borderColor;", cards["pc-quiet"])
    assert colour == "rgb(187, 0, 0)"
    assert cards["pc-busy"].find_element(By.CSS_SELECTOR, "svg.spark polyline")

    browser.execute_script("window.notReloaded = true;")
    post_summaries(client, [50.0], time.time(), host="pc-new")
    WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".host-card[data-host='pc-new']"))
    assert browser.execute_script("return window.notReloaded === true;")
    assert console_problems(browser) == []


def test_overlay_of_hosts_chosen_on_the_overview(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    base, client = served
    now = time.time()
    for n, host in enumerate(("pc-a", "pc-b", "pc-c")):
        post_summaries(client, [1000.0 * (n + 1) + i for i in range(30)], now - 30, host=host)
    browser.get(base + "/")
    Select(browser.find_element(By.ID, "compare-source")).select_by_value("sysnest")
    for host in ("pc-a", "pc-c"):
        browser.find_element(By.CSS_SELECTOR, f"#compare-form input[name='host'][value='{host}']").click()
    browser.find_element(By.ID, "compare-go").click()
    WebDriverWait(browser, 20).until(lambda b: "/compare?" in b.current_url)
    lines = WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "svg.chart polyline.series"))
    drawn = {line.find_element(By.TAG_NAME, "title").get_attribute("textContent"): line for line in lines}
    assert sorted(drawn) == ["pc-a", "pc-c"]
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chart")
    for line in drawn.values():
        assert len(line.get_attribute("points").split()) == 30
        box = browser.execute_script("const b = arguments[0].getBBox(); return [b.x, b.y, b.width, b.height];", line)
        assert box[2] > 100 and 0 <= box[0] and box[0] + box[2] <= float(chart.get_attribute("width")), box
    # pc-c's values are three times pc-a's: its line is drawn higher, on the same scale
    tops = {h: browser.execute_script("return arguments[0].getBBox().y;", line) for h, line in drawn.items()}
    assert tops["pc-c"] < tops["pc-a"]
    # the legend's swatch has the colour of the host's line
    for row in browser.find_elements(By.CSS_SELECTOR, "#legend tbody tr"):
        host = row.get_attribute("data-host")
        swatch = browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor;",
                                        row.find_element(By.CSS_SELECTOR, ".swatch"))
        stroke = browser.execute_script("return getComputedStyle(arguments[0]).stroke;", drawn[host])
        assert swatch == stroke, (host, swatch, stroke)
    assert console_problems(browser) == []


def test_histogram_heatmap_on_the_stream_page(served, browser):
    from selenium.webdriver.common.by import By

    base, client = served
    now = time.time()
    records = []
    for i in range(20):
        for name, counts in (("run_time", [0, 3, 50 + i, 2, 0, 1]), ("runq_latency", [9, 1])):
            buckets = [{"lo": 0 if b == 0 else 2 ** b, "hi": 2 ** (b + 1) - 1, "count": c} for b, c in enumerate(counts)]
            records.append(envelope("cpuschedrun", now - 20 + i, i + 1, "hist", name=name, unit="us",
                                    total=sum(counts), buckets=buckets))
    reply = client.post("/data", json=ours(0, host="pc-h", run_id="run-h", source="cpuschedrun", records=records))
    assert reply.status_code == 200
    browser.get(f"{base}/stream?host=pc-h&run_id=run-h&source=cpuschedrun")
    heat = browser.find_element(By.CSS_SELECTOR, "svg.heatmap[data-hist='run_time']")
    cells = browser.execute_script(
        "return Array.from(arguments[0].querySelectorAll('rect.cell')).map(r => { const b = r.getBBox();"
        " return [+r.dataset.lo, +r.dataset.count, b.x, b.y, b.width, b.height, getComputedStyle(r).fill]; });", heat)
    assert len(cells) == 20 * 4                                       # 20 intervals x 4 non-empty buckets
    totals: dict[int, int] = {}
    for lo, count, *_box, _fill in cells:
        totals[lo] = totals.get(lo, 0) + count
    assert totals == {2: 60, 4: sum(50 + i for i in range(20)), 8: 40, 32: 20}
    width, height = float(heat.get_attribute("width")), float(heat.get_attribute("height"))
    assert all(0 <= x and x + w <= width + 0.01 and 0 <= y and y + h <= height for _l, _c, x, y, w, h, _f in cells)
    # bigger buckets are drawn higher up; the busiest bucket darkest
    rows = {lo: y for lo, _c, _x, y, *_rest in cells}
    assert rows[2] > rows[4] > rows[8] > rows[32]

    def lightness(fill: str) -> int:
        return sum(int(v) for v in fill[fill.index("(") + 1:-1].split(","))

    darkest = min(cells, key=lambda c: lightness(c[6]))
    assert darkest[0] == 4 and darkest[1] == 69
    assert browser.find_elements(By.CSS_SELECTOR, "svg.heatmap[data-hist='runq_latency'] rect.cell")
    assert console_problems(browser) == []


def test_event_scatter_with_failed_connects_apart(served, browser):
    from selenium.webdriver.common.by import By

    base, client = served
    now = time.time()
    events = [envelope("tcpconnlat", now - 30 + i, 0, "event", pid=200 + i, comm="curl", daddr="127.0.0.1", dport=80,
                       latency_ms=0.1 + 0.01 * i, status="failed" if i % 5 == 4 else "ok") for i in range(30)]
    reply = client.post("/data", json=ours(0, host="pc-t", run_id="run-t", source="tcpconnlat", records=events))
    assert reply.status_code == 200
    browser.get(f"{base}/stream?host=pc-t&run_id=run-t&source=tcpconnlat")
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chart")
    drawn = browser.execute_script(
        "return Array.from(arguments[0].querySelectorAll('g.series')).map(g => [g.dataset.series,"
        " Array.from(g.querySelectorAll('.point')).map(p => { const b = p.getBBox(); return [p.tagName, b.x, b.y,"
        " b.width, b.height]; }), getComputedStyle(g).stroke]);", chart)
    assert [(name, len(pts)) for name, pts, _c in drawn] == [("ok", 24), ("failed", 6)]
    (_ok, ok_pts, ok_colour), (_f, failed_pts, failed_colour) = drawn
    assert {p[0] for p in ok_pts} == {"circle"} and {p[0] for p in failed_pts} == {"path"}
    assert ok_colour != failed_colour
    width, height = float(chart.get_attribute("width")), float(chart.get_attribute("height"))
    assert all(0 <= x and x + w <= width and 0 <= y and y + h <= height and w > 0 for _t, x, y, w, h in ok_pts + failed_pts)
    # later events to the right, slower ones higher: each series' points follow the posted order
    for pts in (ok_pts, failed_pts):
        assert [p[1] for p in pts] == sorted(p[1] for p in pts) and [p[2] for p in pts] == sorted((p[2] for p in pts), reverse=True)
    legend = [e.text for e in chart.find_elements(By.CSS_SELECTOR, "g.legend text")]
    assert legend == ["ok (24)", "failed (6)"]
    assert console_problems(browser) == []
