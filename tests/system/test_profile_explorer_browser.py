"""The profile explorer's compare view in a real headless browser (Chromium, as test_server_browser.py):
a base run picked in the form turns the flame graph differential, the function whose share shrank drawn
blue, the one that grew red, each as wide as its share of the selection, the functions by change beside
it; the address then holds the whole state and opens the same view again; nothing logs an error or
answers 404."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from browser import problems
from stack_posts import cpu_stack, post_stacks

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

T0 = 1_750_000_000.0


def drawn(driver) -> dict[str, list]:
    """Each frame's name -> [its rect's fill, its width as a share of the graph's]."""
    return driver.execute_script("""
        const svg = document.querySelector('svg.flamegraph.differential'), out = {};
        const whole = svg.getBoundingClientRect().width;
        for (const g of svg.querySelectorAll('g.frame')) {
            const r = g.querySelector('rect');
            out[g.dataset.name] = [r.getAttribute('fill'), r.getBoundingClientRect().width / whole];
        }
        return out;""")


def test_explorer_compare_view_draws_the_change_and_keeps_it_in_the_url(served, browser):  # noqa: F811 - fixtures
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, client = served
    for run_id, a, b, n in (("R1", 70, 30, 3), ("R2", 30, 70, 6)):
        post_stacks(client, "pc-a", run_id, [[cpu_stack(T0 + 10 * i, i + 1, "hot_a", a),
                                              cpu_stack(T0 + 10 * i, i + 1, "hot_b", b)] for i in range(n)])
    browser.get(base + "/profiles?source=cpuprofile&run_id=R2")
    browser.find_element(By.CSS_SELECTOR, "input[name=base_run_id][value=R1]").click()
    browser.find_element(By.ID, "compare-on").click()
    browser.find_element(By.ID, "explorer-go").click()
    # the click submits the form: the answer is a new page, read only once it has drawn (CI of 508da80 read
    # the old page, which has no differential graph, while the new one loaded)
    WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "svg.flamegraph.differential g.frame"))
    frames = drawn(browser)
    assert frames["hot_a"][0] == "rgb(35,35,255)" and frames["hot_b"][0] == "rgb(255,35,35)"
    assert frames["hot_b"][1] == pytest.approx(0.7, abs=0.01) and frames["hot_a"][1] == pytest.approx(0.3, abs=0.01)
    rows = [r.text.split() for r in browser.find_elements(By.CSS_SELECTOR, "#functions-by-change tbody tr")]
    assert rows[0][:4] == ["hot_a", "70.0", "30.0", "-40.0"] and rows[1][:4] == ["hot_b", "30.0", "70.0", "+40.0"]
    asked = parse_qs(urlsplit(browser.current_url).query)
    assert asked["run_id"] == ["R2"] and asked["base_run_id"] == ["R1"] and asked["compare"] == ["on"]
    shared = browser.find_element(By.ID, "permalink").get_attribute("href")
    browser.get(shared)   # a link shared with the class opens the same view
    assert drawn(browser) == frames
    assert problems(browser) == []
