"""The web console in headless Chromium, as a user clicks it: ``relay console`` serving a SQLite,
a PostgreSQL and a Redis store, each with a live instance running.

Each page is saved as a screenshot under ``tests/artifacts/``; with ``RELAY_DOCS_SCREENSHOTS=1``
the SQLite run also saves them as ``docs/img/console-*.png``, the pictures of docs/console.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from relay import Control
from relay.cli import main as relay_cli
from relay.control_schedules import operator
from relay.runs import format_slot
from tests.console.conftest import ENV, stop, wait_for
from tests.console.instance import HOSTILE
from tests.support.browser import chromium, screenshot
from tests.support.ports import free_port
from tests.support.procs import ROOT

pytestmark = pytest.mark.slow

DOCS_IMAGES = ROOT / "docs" / "img"
REASON = "<img src=x onerror=alert(1)> disk full"


@pytest.fixture(scope="module")
def served(site: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``relay console`` on a free loopback port, over the site's store."""
    port = free_port()
    command = [sys.executable, "-m", "relay.cli", "console", "--backend", site["url"]]
    log = site["folder"] / "console.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [*command, "--port", str(port)], cwd=ROOT, env=ENV, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: port_open(port, server, log), 60, "relay console")
        yield {**site, "base": f"http://127.0.0.1:{port}"}
    finally:
        server.send_signal(signal.SIGINT)
        stop(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def port_open(port: int, server: subprocess.Popen[bytes], log: Any) -> bool:
    import socket

    assert server.poll() is None, log.read_text()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def shot(driver: Any, served: dict[str, Any], name: str) -> None:
    """A screenshot of the page; the SQLite run's also into docs/img/ when asked."""
    saved = screenshot(driver, f"console-{name}-{served['backend']}")
    if os.environ.get("RELAY_DOCS_SCREENSHOTS") == "1" and served["backend"] == "sqlite":
        DOCS_IMAGES.mkdir(exist_ok=True)
        shutil.copyfile(saved, DOCS_IMAGES / f"console-{name}.png")
    driver.set_window_size(1400, 1000)


def text(driver: Any, selector: str) -> str:
    """The text of the first element ``selector`` finds (read again if a live part's refresh
    replaced it meanwhile)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(5):
        try:
            found: str = driver.find_element(By.CSS_SELECTOR, selector).get_attribute("textContent")
            return found
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} kept being replaced")


def click(driver: Any, selector: str) -> None:
    """Click a link or a form's button, and wait until the next page replaced this one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, selector).click()
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(page))


def fill(driver: Any, selector: str, value: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.CSS_SELECTOR, selector)
    field.clear()
    field.send_keys(value)


def flash(driver: Any) -> str:
    """The page's messages, once the page after a click has them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "p.flash"))
    )
    return " ".join(
        e.get_attribute("textContent") for e in driver.find_elements(By.CSS_SELECTOR, "p.flash")
    )


def field_errors(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [
        e.get_attribute("textContent").strip()
        for e in driver.find_elements(By.CSS_SELECTOR, ".field-error, p.form-error")
    ]


def cli_error(*args: str) -> str:
    result = CliRunner().invoke(relay_cli, list(args))
    return result.output.strip().splitlines()[-1].removeprefix("Error: ")


def test_a_user_pauses_resumes_triggers_and_backfills_a_job(
    served: dict[str, Any], browser: Any
) -> None:
    base, url = served["base"], served["url"]
    browser.get(base + "/")
    jobs = browser.execute_script(
        "return [...document.querySelectorAll('tr.job')].map(r => r.dataset.job)"
    )
    assert jobs == sorted([HOSTILE, "tick"])
    shot(browser, served, "jobs")

    click(browser, f'tr[data-job="{HOSTILE.replace(chr(34), chr(92) + chr(34))}"] a')
    assert text(browser, "h1 .name") == HOSTILE  # shown as text, never run as markup
    fill(browser, "#pause-form input[name=reason]", REASON)
    click(browser, "#pause-form button")
    assert "Paused" in flash(browser)
    assert REASON in text(browser, "dd.state") and "(console)" in text(browser, "dd.state")
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    shot(browser, served, "job-paused")
    with Control(url) as control:
        status = control.job(HOSTILE)
        assert status.paused_reason == REASON and status.paused_by == f"{operator()} (console)"

    click(browser, "#resume-form button")
    assert "Resumed" in flash(browser)
    click(browser, "#trigger-form button")
    assert "Triggered" in flash(browser) and "@manual:" in flash(browser)

    with Control(url) as control:
        now = control.backend.now()  # type: ignore[union-attr]
    hour = now.replace(minute=0, second=0, microsecond=0)
    start, end = format_slot(hour - timedelta(hours=2)), format_slot(hour - timedelta(hours=1))
    fill(browser, "#backfill-form input[name=start]", "last tuesday")
    fill(browser, "#backfill-form input[name=end]", end)
    click(browser, "#backfill-form button")
    said = cli_error("backfill", "tick", "--backend", url, "--start", "last tuesday", "--end", end)
    assert said in field_errors(browser)
    shot(browser, served, "backfill-error")
    fill(browser, "#backfill-form input[name=start]", start)
    click(browser, "#backfill-form button")
    assert "2 runs created" in flash(browser)


def test_a_user_adds_edits_toggles_and_removes_a_stored_schedule(
    served: dict[str, Any], browser: Any
) -> None:
    base, url = served["base"], served["url"]
    name = "report <b>&</b>"
    browser.get(base + "/schedules")
    click(browser, "#add-schedule")
    fill(browser, "#f-name", name)
    fill(browser, "#f-task", "echo")
    fill(browser, "#f-every", "every hour")
    fill(browser, "#f-description", "<script>alert('d')</script>")
    click(browser, "#save")
    said = cli_error("schedules", "add", "x", "echo", "--backend", url, "--every", "every hour")
    assert said in field_errors(browser)
    shot(browser, served, "schedule-error")
    with Control(url) as control:
        assert control.schedules() == []  # nothing written
    fill(browser, "#f-every", "1h")
    click(browser, "#save")
    assert f"Added {name} (version 1)" in flash(browser)
    row = f'tr[data-schedule="{name}"]'
    assert text(browser, f"{row} td.version") == "1"
    shot(browser, served, "schedules")

    click(browser, f"{row} a.edit")
    with Control(url) as control:  # another user saves first
        control.update_schedule(name, version=1, by="bob@ops", every=7200)
    fill(browser, "#f-every", "30m")
    click(browser, "#save")
    conflict = " ".join(field_errors(browser))
    assert "Not saved" in conflict and "bob@ops" in conflict and "version 2" in conflict
    shot(browser, served, "schedule-conflict")
    browser.get(f"{base}/schedule/edit/{quote(name, safe='')}")
    fill(browser, "#f-every", "30m")
    click(browser, "#save")
    assert "now at version 3" in flash(browser)

    click(browser, f"{row} form.toggle button")
    assert "Disabled" in flash(browser) and text(browser, f"{row} td.enabled") == "no"
    click(browser, f"{row} form.toggle button")
    assert "Enabled" in flash(browser) and text(browser, f"{row} td.enabled") == "yes"
    click(browser, f'{row} a[href*="/schedule/history/"]')
    versions = browser.execute_script(
        "return [...document.querySelectorAll('tr.change')].map(r => r.dataset.version)"
    )
    assert versions == ["5", "4", "3", "2", "1"]
    shot(browser, served, "schedule-history")
    browser.get(base + "/schedules")
    click(browser, f"{row} a.remove")
    click(browser, "#confirm-remove")
    assert f"Removed {name}" in flash(browser)
    with Control(url) as control:
        assert control.schedules() == []


KEEP = """
const rows = [...document.querySelectorAll('tr.run')];
window.kept = rows[2];
window.head = document.querySelector('thead');
window.noReload = true;
return [window.kept.dataset.run, rows[0].dataset.run, window.relayConsole.swaps];
"""
"""Mark the third run shown (finished: it does not change), the table's head and the page."""
SAME = """
return document.querySelector(`tr.run[data-run='${window.kept.dataset.run}']`) === window.kept
  && document.querySelector('thead') === window.head;
"""
"""Whether the marked row and head are still the very elements the page had."""


def test_pages_stay_live_and_leave_what_did_not_change(
    served: dict[str, Any], browser: Any
) -> None:
    base = served["base"]
    browser.get(base + "/runs?job=tick")
    oldest, newest, swaps = browser.execute_script(KEEP)

    def newer() -> bool:
        first = browser.execute_script("return document.querySelector('tr.run').dataset.run")
        return bool(first > newest and browser.execute_script("return window.noReload"))

    wait_for(newer, 30, "a new run of tick on the page")
    assert browser.execute_script("return window.relayConsole.swaps") > swaps
    assert browser.execute_script(SAME), f"the unchanged row {oldest} was drawn again"
    shot(browser, served, "runs")

    browser.get(base + "/timeline?job=tick&since=30s")
    wait_for(lambda: browser.execute_script("return window.relayConsole.swaps") > 0, 30)
    assert browser.execute_script("return document.querySelectorAll('g.run').length") > 0
    shot(browser, served, "timeline")

    browser.get(base + "/instances")
    assert "echo" in text(browser, "tr.instance")
    shot(browser, served, "instances")
    before = browser.execute_script(
        "window.head = document.querySelector('thead');"
        "window.beat = document.querySelector('tr.instance td.beat').textContent;"
        "return window.relayConsole.swaps"
    )
    wait_for(lambda: browser.execute_script("return window.relayConsole.swaps") > before, 30)
    # a heartbeat changed the instance's row; the table's head is the very same element
    assert browser.execute_script(
        "return document.querySelector('thead') === window.head && "
        "document.querySelector('tr.instance td.beat').textContent !== window.beat"
    )

    browser.get(base + "/runs?job=tick")
    click(browser, "tr.run a")
    assert "fencing token" in text(browser, "ol.story")
    shot(browser, served, "run")
