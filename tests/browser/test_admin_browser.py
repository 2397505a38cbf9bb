"""Relay's admin pages in headless Chromium, served by a real ``manage.py runserver``.

The test site keeps Relay's store in its own SQLite database (``RELAY = {"BACKEND": "django"}``).
Four visitors: anonymous, a staff user with no Relay permission, a viewer (``relay.view_job``,
``relay.view_run``) and an operator who may also control jobs (``relay.control_job``). Each page
each of them sees is saved as a screenshot.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from relay import AcquireRequest, Control, open_backend
from tests.django_app.support import manage, site_env, spawn_manage
from tests.support.browser import (
    chromium,
    drawn,
    require_chromium,
    screenshot,
    wait_for_port,
)
from tests.support.browser import log_in as browser_log_in
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

USERS = """
from django.contrib.auth.models import Permission, User
def make(name, codenames):
    user = User.objects.create_user(name, password="secret-pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="relay", codename__in=codenames))
make("operator", ["view_job", "view_run", "control_job"])
make("viewer", ["view_job", "view_run"])
make("outsider", [])
"""
FORGED_POST = """
const done = arguments[arguments.length - 1];
const token = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || '';
const body = new URLSearchParams({action: 'pause', _selected_action: 'report',
                                  csrfmiddlewaretoken: arguments[0] ? token : ''});
fetch(location.href, {method: 'POST', body, redirect: 'manual'})
  .then(r => r.text().then(text => done([r.status, text.includes('CSRF verification failed')])));
"""
"""POST the pause action for "report" from the page, with the CSRF token or not: [status, whether
Django refused it for its CSRF token]."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A migrated site with users and a store holding runs of two jobs, served on a free port."""
    require_chromium()
    folder = tmp_path_factory.mktemp("admin")
    db = folder / "db.sqlite3"
    env = site_env(db, RELAY={"BACKEND": "django"})
    for args in (["migrate", "-v", "0"], ["shell", "-c", USERS]):
        done = manage(env, *args)
        assert done.returncode == 0, done.stderr
    url = f"sqlite:///{db}"
    ids = fill(url)
    port = free_port()
    server = spawn_manage(env, "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}")
    try:
        wait_for_port(port, server)
        yield {"base": f"http://127.0.0.1:{port}/admin/", "url": url, "ids": ids}
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=20)
        except Exception:
            server.kill()
            server.communicate()


def fill(url: str) -> list[str]:
    store = open_backend(url)
    assert store.capability == "lease"
    now = store.now().replace(microsecond=0)
    ids = []
    for job in ("cleanup", "report"):
        for n in range(5):
            request = AcquireRequest(job, now - timedelta(seconds=50 - 10 * n), "host-a:1", 30)
            won = store.acquire(request).run
            assert won is not None
            store.start(won.id, won.token, won.owner, 30)
            store.finish(won.id, won.token, succeeded=n != 2, error=None if n != 2 else "boom")
            ids.append(won.id)
    store.close()
    return ids


@pytest.fixture(scope="module")
def browser(site: dict[str, Any]) -> Iterator[Any]:
    with chromium() as driver:
        driver.set_script_timeout(20)
        yield driver


def log_in(driver: Any, site: dict[str, Any], user: str) -> None:
    browser_log_in(driver, site["base"], user, "secret-pw")


def rows(driver: Any, selector: str, attribute: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.get_attribute(attribute) for e in driver.find_elements(By.CSS_SELECTOR, selector)]


PAGES = {"jobs": "relay/job/", "runs": "relay/run/", "timeline": "relay/run/timeline/"}


def test_anonymous_visitors_see_nothing(site: dict[str, Any], browser: Any) -> None:
    browser.delete_all_cookies()
    for name, page in PAGES.items():
        browser.get(site["base"] + page)
        assert "/admin/login/" in browser.current_url, name
        assert "report" not in browser.page_source and "host-a" not in browser.page_source
    screenshot(browser, "admin-anonymous")


def test_staff_without_relay_permissions_are_refused(site: dict[str, Any], browser: Any) -> None:
    log_in(browser, site, "outsider")
    for name, page in PAGES.items():
        browser.get(site["base"] + page)
        assert "403" in browser.title or "Forbidden" in browser.page_source, name
        assert "host-a" not in browser.page_source
    screenshot(browser, "admin-outsider")


def test_a_viewer_sees_jobs_runs_and_the_timeline_but_cannot_act(
    site: dict[str, Any], browser: Any
) -> None:
    log_in(browser, site, "viewer")
    browser.get(site["base"] + PAGES["jobs"])
    assert rows(browser, "tr.relay-job", "data-job") == ["cleanup", "report"]
    assert not rows(browser, "#relay-action", "name")  # no action form
    screenshot(browser, "admin-jobs-viewer")
    # The action is refused for want of the permission, and without a CSRF token for that too.
    assert browser.execute_async_script(FORGED_POST, True) == [403, False]
    assert browser.execute_async_script(FORGED_POST, False) == [403, True]

    browser.get(site["base"] + PAGES["runs"])
    assert sorted(rows(browser, "tr.relay-run", "data-run")) == sorted(site["ids"])
    screenshot(browser, "admin-runs-viewer")
    browser.get(site["base"] + PAGES["runs"] + "?job=report&state=failed")
    (failed,) = rows(browser, "tr.relay-run", "data-run")
    assert failed == site["ids"][7] and "boom" in browser.page_source

    browser.get(site["base"] + PAGES["timeline"])
    seen = drawn(browser)
    assert seen["jobs"] == ["cleanup", "report"]
    assert sorted(r["id"] for r in seen["runs"]) == sorted(site["ids"])
    by_id = {r["id"]: r for r in seen["runs"]}
    assert "s-failed" in by_id[site["ids"][7]]["cls"]
    assert (
        "token " in by_id[site["ids"][0]]["title"]
        and "owner host-a:1" in by_id[site["ids"][0]]["title"]
    )
    screenshot(browser, "admin-timeline-viewer")
    browser.get(site["base"] + PAGES["timeline"] + "?job=report&since=1h")
    assert {r["job"] for r in drawn(browser)["runs"]} == {"report"}


def test_an_operator_pauses_resumes_and_triggers_a_job(site: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait

    log_in(browser, site, "operator")
    browser.get(site["base"] + PAGES["jobs"])
    assert browser.execute_async_script(FORGED_POST, False) == [403, True]  # no CSRF token

    def act(action: str, reason: str = "") -> str:
        browser.get(site["base"] + PAGES["jobs"])
        browser.find_element(By.CSS_SELECTOR, 'input[value="report"]').click()
        Select(browser.find_element(By.ID, "relay-action")).select_by_value(action)
        browser.find_element(By.ID, "relay-reason").send_keys(reason)
        browser.find_element(By.ID, "relay-go").click()
        found = WebDriverWait(browser, 20).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "ul.messagelist"))
        )
        text: str = found.get_attribute("textContent")  # as written, not as styled
        return text

    assert "Paused report." in act("pause", "disk full")
    cell = browser.find_element(By.CSS_SELECTOR, 'tr[data-job="report"] td.relay-pause')
    pause = cell.get_attribute("textContent")
    assert "paused" in pause and "operator" in pause and "disk full" in pause
    screenshot(browser, "admin-jobs-operator-paused")
    control = Control(site["url"])
    try:
        assert {j.name: j.paused for j in control.jobs()} == {"cleanup": False, "report": True}
        assert "Resumed report." in act("resume")
        assert not {j.name: j.paused for j in control.jobs()}["report"]
        assert "Triggered report: report@manual:" in act("trigger")
        manual = [r for r in control.backend.runs("report", 50) if "@manual:" in r.id]
        assert len(manual) == 1
    finally:
        control.close()
    screenshot(browser, "admin-jobs-operator-triggered")
