"""The live dashboard of `accelsql serve --http` in a real browser: headless Chromium through
WebDriver (Debian's `chromium` and `chromium-driver`, which scripts/test-all.sh installs). Two GPU
statements wait on each other on two simulated GPUs; the page must show the holder and the
waiter, end the waiter's session from its button (after the confirmation) so that its statement
fails with a coded error, load nothing from another host, and leave a screenshot under target/."""

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from test_http import HttpServer, assert_stopped, hold_and_wait, streaming

ROOT = Path(__file__).resolve().parents[2]

webdriver = pytest.importorskip("selenium.webdriver")


def _chromium():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip("SKIPPED: no chromium and chromedriver (apt-get install chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="module")
def server(tmp_path_factory, accelsql_binary):
    s = HttpServer(accelsql_binary, tmp_path_factory.mktemp("browser"))
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture
def browser(server):
    binary, driver_path = _chromium()
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = binary
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    # Every request of the page carries the login (the token as a bearer).
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Bearer " + server.token}}
    )
    try:
        yield driver
    finally:
        driver.quit()


def _rows(driver, box):
    return [json.loads(tr.get_attribute("data-row"))
            for tr in driver.find_elements("css selector", f"#{box} tr[data-row]")]


def test_the_dashboard_shows_the_queue_and_ends_a_session(server, browser):
    browser.get(server.http + "/")
    assert "accelsql" in browser.title
    outcomes, holder, waiter = hold_and_wait(server, 5)
    deadline = time.time() + 20
    leases = []
    while time.time() < deadline:
        leases = _rows(browser, "leases")
        if sorted(l["state"] for l in leases) == ["holding", "waiting"]:
            break
        time.sleep(0.3)
    assert sorted(l["state"] for l in leases) == ["holding", "waiting"], leases
    assert len(_rows(browser, "devices")) == 2
    # The holder's row is marked as holding; the waiter's row says how long it has waited.
    assert browser.find_elements("css selector", "#leases tr.holding")
    assert browser.find_elements("css selector", "#leases tr.waiting")
    out = ROOT / "target" / "dashboard.png"
    out.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(out))
    assert out.stat().st_size > 10_000
    waiting = next(l for l in leases if l["state"] == "waiting")
    # End the waiter's session from its row's button, confirming the dialog.
    clicked = browser.execute_script(
        """
        for (const tr of document.querySelectorAll('#sessions tr[data-row]')) {
          if (JSON.parse(tr.dataset.row).session_id === arguments[0]) {
            const button = tr.querySelector('button');
            setTimeout(() => button.click(), 0);
            return true;
          }
        }
        return false;
        """,
        waiting["session"],
    )
    assert clicked, (waiting["session"], _rows(browser, "sessions"))
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 5).until(expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()
    waiter.join(30)
    holder.join(30)
    assert isinstance(outcomes.get("waiter"), Exception), outcomes
    assert re.search(r"\[\w{5}\]", str(outcomes["waiter"])), outcomes["waiter"]
    assert outcomes["holder"] == [(5.0,)]
    status = browser.find_element("id", "status").text
    assert "ended" in status or "updated" in status, status
    # Nothing the page asked for left for another host.
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    assert urls and all(u.startswith(server.http) for u in urls), [u for u in urls if not u.startswith(server.http)]


def test_the_page_shows_a_statements_rows_rising_and_stops_it_from_its_button(server, browser):
    browser.get(server.http + "/")
    with streaming(server, "SELECT value AS n FROM generate_series(1, 300000000)") as reader:
        seen = []
        deadline = time.time() + 30
        while time.time() < deadline and len(set(seen)) < 3:
            reader.read_next_batch()
            time.sleep(1.1)  # the page polls each second
            rows = [r for r in _rows(browser, "statements") if "generate_series" in r["sql"]]
            if rows:
                seen.append(rows[0]["rows"])
        # What the page shows rises as the client reads.
        assert len(set(seen)) >= 3 and seen == sorted(seen), seen
        cell = browser.find_element("css selector", "#statements tr[data-row] td:nth-child(6)")
        assert int(cell.text) >= seen[0], cell.text
        clicked = browser.execute_script(
            """
            for (const tr of document.querySelectorAll('#statements tr[data-row]')) {
              if (JSON.parse(tr.dataset.row).sql.includes('generate_series')) {
                const button = tr.querySelector('button');
                setTimeout(() => button.click(), 0);
                return true;
              }
            }
            return false;
            """
        )
        assert clicked
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(browser, 5).until(expected_conditions.alert_is_present())
        browser.switch_to.alert.accept()
        assert_stopped(reader)
        WebDriverWait(browser, 5).until(
            lambda d: "stopped" in d.find_element("id", "status").text
            or not [r for r in _rows(d, "statements") if "generate_series" in r["sql"]]
        )
