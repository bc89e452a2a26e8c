"""The stream page's cgroup filter in a real headless browser (tests/support/browser.py): a path typed
with "and the groups below it" keeps that subtree's records, a group the page lists is one click, the
range links keep the filter, and "all cgroups" clears it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from collector_payloads import envelope, ours

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

T0 = 1_760_000_000.0
GROUPS = ("/lab/a", "/lab/a/job1", "/lab/ab", "/lab/b")


def cgroups_shown(browser) -> list[str]:
    from selenium.webdriver.common.by import By

    table = browser.find_element(By.ID, "records")
    headers = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    column = headers.index("Cgroup")
    return [row.find_elements(By.TAG_NAME, "td")[column].text
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]


def test_the_cgroup_filter_in_a_browser(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    base, client = served
    records = [envelope("sysnest", T0 + 10 * g + k, 1 + k, "row", pid=100 + 10 * g + k, comm="w", count=k,
                        cgroup_id=50 + g, cgroup=path) for g, path in enumerate(GROUPS) for k in range(3)]
    assert client.post("/data", json=ours(0, host="lab-pc-09", run_id="run-cg", records=records)).status_code == 200
    browser.get(base + "/stream?host=lab-pc-09&run_id=run-cg&source=sysnest")
    assert sorted(cgroups_shown(browser)) == sorted(p for p in GROUPS for _ in range(3))

    box = browser.find_element(By.ID, "cgroup")
    box.send_keys("/lab/a")
    Select(browser.find_element(By.ID, "cgroup-match")).select_by_value("tree")
    browser.find_element(By.ID, "apply-cgroup").click()
    WebDriverWait(browser, 15).until(lambda b: "cgroup_match=tree" in b.current_url)
    assert parse_qs(urlparse(browser.current_url).query)["cgroup"] == ["/lab/a"]
    assert sorted(cgroups_shown(browser)) == ["/lab/a"] * 3 + ["/lab/a/job1"] * 3   # not /lab/ab
    assert browser.find_element(By.ID, "cgroup-shown").text == "/lab/a"

    # a range link keeps the filter
    browser.find_element(By.CSS_SELECTOR, "a.range[data-range='1h']").click()
    WebDriverWait(browser, 15).until(lambda b: "range=1h" in b.current_url)
    assert "cgroup_match=tree" in browser.current_url
    assert sorted(cgroups_shown(browser)) == ["/lab/a"] * 3 + ["/lab/a/job1"] * 3

    # a listed group: its own records only
    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "a.cgroup-link") if a.text == "/lab/ab")
    link.click()
    WebDriverWait(browser, 15).until(lambda b: "cgroup=%2Flab%2Fab" in b.current_url or "cgroup=/lab/ab" in b.current_url)
    assert cgroups_shown(browser) == ["/lab/ab"] * 3

    browser.find_element(By.ID, "clear-cgroup").click()
    WebDriverWait(browser, 15).until(lambda b: "cgroup" not in b.current_url)
    assert len(cgroups_shown(browser)) == 12
