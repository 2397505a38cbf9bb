"""The stored-schedule pages of the admin in headless Chromium, served by a real
``manage.py runserver``: add, edit (and a conflicting edit), disable and enable, delete, the
history, and users without the permission refused.

The test site keeps Relay's store in its own SQLite database (``RELAY = {"BACKEND": "django"}``),
where a live instance allows the task ``echo``. Three staff users: an editor
(``relay.view_schedule`` and ``relay.change_schedule``), a viewer (``relay.view_schedule``) and an
outsider (``relay.view_job`` only). Each test works on schedules of its own; each page is saved as
a screenshot.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from relay import Control
from tests.django_app.support import manage, site_env, spawn_manage
from tests.django_app.test_admin_schedules import BY, allow
from tests.support.browser import chromium, require_chromium, screenshot, wait_for_port
from tests.support.browser import log_in as browser_log_in
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

USERS = """
from django.contrib.auth.models import Permission, User
def make(name, codenames):
    user = User.objects.create_user(name, password="secret-pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="relay", codename__in=codenames))
make("editor", ["view_schedule", "change_schedule"])
make("viewer", ["view_schedule"])
make("outsider", ["view_job"])
"""
FORGED_POST = """
const done = arguments[arguments.length - 1];
const token = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || '';
const body = new URLSearchParams({name: arguments[1], version: '1', enabled: '0',
                                  csrfmiddlewaretoken: arguments[0] ? token : ''});
fetch(location.href, {method: 'POST', body, redirect: 'manual'})
  .then(r => r.text().then(text => done([r.status, text.includes('CSRF verification failed')])));
"""
"""POST "disable schedule arguments[1]" from the page, with the CSRF token or not: [status, whether
Django refused it for its CSRF token]."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A migrated site with users and a live instance allowing ``echo``, served on a free port."""
    require_chromium()
    db = tmp_path_factory.mktemp("schedules") / "db.sqlite3"
    env = site_env(db, RELAY={"BACKEND": "django"})
    for args in (["migrate", "-v", "0"], ["shell", "-c", USERS]):
        done = manage(env, *args)
        assert done.returncode == 0, done.stderr
    url = f"sqlite:///{db}"
    allow(url, "echo")
    port = free_port()
    server = spawn_manage(env, "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}")
    try:
        wait_for_port(port, server)
        yield {"base": f"http://127.0.0.1:{port}/admin/", "url": url}
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=20)
        except Exception:
            server.kill()
            server.communicate()


@pytest.fixture(scope="module")
def browser(site: dict[str, Any]) -> Iterator[Any]:
    with chromium() as driver:
        driver.set_script_timeout(20)
        yield driver


def log_in(driver: Any, site: dict[str, Any], user: str) -> None:
    browser_log_in(driver, site["base"], user, "secret-pw")


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def text(element: Any) -> str:
    """An element's text as written (not as styled)."""
    found: str = element.get_attribute("textContent")
    return found


def after_click(driver: Any, selector: str, then: str) -> Any:
    """Click ``selector``, then wait for ``then`` on the page that follows; return it."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")

    def left(_: Any) -> bool:
        """The page clicked on is gone. Mid-navigation Chromium may answer "does not belong to
        the document" (a WebDriverException) instead of a stale element: the same fact."""
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" not in str(exc):
                raise
            return True
        return False

    driver.find_element(By.CSS_SELECTOR, selector).click()
    WebDriverWait(driver, 20).until(left)
    return WebDriverWait(driver, 20).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, then))
    )


def fill(driver: Any, **values: str) -> None:
    """Type ``values`` into the schedule form's fields (each cleared first)."""
    for name, value in values.items():
        (field,) = css(driver, f'#relay-schedule-form [name="{name}"]')
        field.clear()
        field.send_keys(value)


def row(driver: Any, name: str) -> dict[str, str]:
    """The list's row of schedule ``name``: its enabled, version, runnable and next-run cells."""
    (found,) = css(driver, f'tr[data-schedule="{name}"]')
    cells = ("enabled", "version", "state", "next")
    return {c: text(found.find_element("css selector", f"td.relay-{c}")) for c in cells}


def stored(site: dict[str, Any], name: str) -> Any:
    with Control(site["url"], read_only=True) as control:
        return control.schedule(name)


def test_an_editor_adds_a_schedule_and_sees_the_checks(site: dict[str, Any], browser: Any) -> None:
    log_in(browser, site, "editor")
    browser.get(site["base"] + "relay/schedule/")
    after_click(browser, "#relay-add-schedule", "#relay-schedule-form")
    fill(browser, name="nightly", task="echo", cron="99 3 * * *", tz="Europe/Paris")
    after_click(browser, "#relay-save", "#relay-schedule-form")
    (error,) = css(browser, ".field-cron.errors .errorlist")
    assert "minute field" in text(error)
    screenshot(browser, "admin-schedule-add-error")
    fill(browser, cron="0 3 * * *", args='["daily"]')
    found = after_click(browser, "#relay-save", "ul.messagelist")
    assert "Added nightly (version 1)." in text(found)
    shown = row(browser, "nightly")
    assert shown.pop("next").startswith("20")
    assert shown == {
        "enabled": "yes", "version": "1", "state": "task echo, on 1 live instance(s)",
    }  # fmt: skip
    screenshot(browser, "admin-schedules-editor")
    nightly = stored(site, "nightly")
    assert (nightly.cron, nightly.tz, nightly.args, nightly.updated_by) == (
        "0 3 * * *", "Europe/Paris", ("daily",), BY,
    )  # fmt: skip


def test_an_editor_edits_a_schedule_and_a_stale_edit_is_refused(
    site: dict[str, Any], browser: Any
) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("hourly", "echo", every=3600, by="ann")
    log_in(browser, site, "editor")
    browser.get(site["base"] + "relay/schedule/")
    after_click(browser, 'tr[data-schedule="hourly"] th a', "#relay-schedule-form")
    (version,) = css(browser, 'input[type="hidden"][name="version"]')
    assert version.get_attribute("value") == "1"
    fill(browser, every="30m")
    found = after_click(browser, "#relay-save", "ul.messagelist")
    assert "Saved hourly: now at version 2." in text(found)
    assert row(browser, "hourly")["version"] == "2"
    assert stored(site, "hourly").every == 1800.0

    browser.get(site["base"] + "relay/schedule/hourly/change/")
    with Control(site["url"]) as control:  # someone else changes it meanwhile
        control.update_schedule("hourly", version=2, every=600, by="bob")
    fill(browser, every="45m")
    error = after_click(browser, "#relay-save", "#relay-form-errors")
    assert "at version 3" in text(error) and "by bob" in text(error)
    screenshot(browser, "admin-schedule-conflict")
    assert (stored(site, "hourly").version, stored(site, "hourly").every) == (3, 600.0)
    after_click(browser, "#relay-reload", "#relay-schedule-form")
    (version,) = css(browser, 'input[type="hidden"][name="version"]')
    assert version.get_attribute("value") == "3"


def test_an_editor_disables_and_enables_a_schedule(site: dict[str, Any], browser: Any) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("pausable", "echo", every=60, by="ann")
    log_in(browser, site, "editor")
    browser.get(site["base"] + "relay/schedule/")
    toggle = 'tr[data-schedule="pausable"] form.relay-toggle button'
    found = after_click(browser, toggle, "ul.messagelist")
    assert "Disabled pausable (version 2)." in text(found)
    assert row(browser, "pausable")["enabled"] == "no" and not row(browser, "pausable")["next"]
    assert "paused (enabled=False)" in row(browser, "pausable")["state"]
    screenshot(browser, "admin-schedule-disabled")
    assert not stored(site, "pausable").enabled
    found = after_click(browser, toggle, "ul.messagelist")
    assert "Enabled pausable (version 3)." in text(found)
    assert stored(site, "pausable").enabled


def test_an_editor_deletes_a_schedule_and_its_history_stays(
    site: dict[str, Any], browser: Any
) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("doomed", "echo", every=60, by="ann")
    log_in(browser, site, "editor")
    browser.get(site["base"] + "relay/schedule/")
    after_click(browser, 'tr[data-schedule="doomed"] a.relay-delete', "#relay-confirm-delete")
    screenshot(browser, "admin-schedule-delete")
    found = after_click(browser, "#relay-confirm-delete", "ul.messagelist")
    assert "Deleted doomed; its history stays." in text(found)
    assert not css(browser, 'tr[data-schedule="doomed"]')
    with Control(site["url"], read_only=True) as control:
        assert "doomed" not in [s.name for s in control.schedules()]
    browser.get(site["base"] + "relay/schedule/doomed/history/")
    assert [c.get_attribute("data-action") for c in css(browser, "tr.relay-change")] == [
        "remove", "add",
    ]  # fmt: skip


def test_the_history_page_shows_each_version_who_and_what(
    site: dict[str, Any], browser: Any
) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("audited", "echo", every=60, by="ann")
        control.update_schedule("audited", version=1, every=120, by="bob")
    log_in(browser, site, "viewer")
    browser.get(site["base"] + "relay/schedule/")
    after_click(browser, 'tr[data-schedule="audited"] a.relay-history', "tr.relay-change")
    changes = css(browser, "tr.relay-change")
    seen = [(c.get_attribute("data-version"), c.get_attribute("data-by")) for c in changes]
    assert seen == [("2", "bob"), ("1", "ann")]
    (every,) = changes[0].find_elements("css selector", 'li[data-field="every"]')
    assert text(every) == "every: 60.0 → 120.0"
    screenshot(browser, "admin-schedule-history")


def test_users_without_the_permission_are_refused(site: dict[str, Any], browser: Any) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("guarded", "echo", every=60, by="ann")
    log_in(browser, site, "outsider")
    for page in ("relay/schedule/", "relay/schedule/add/", "relay/schedule/guarded/history/"):
        browser.get(site["base"] + page)
        assert "403" in browser.title or "Forbidden" in browser.page_source, page
        assert "guarded" not in browser.page_source
    screenshot(browser, "admin-schedules-outsider")

    log_in(browser, site, "viewer")
    browser.get(site["base"] + "relay/schedule/")
    assert css(browser, 'tr[data-schedule="guarded"]')
    assert not css(browser, "#relay-add-schedule") and not css(browser, "form.relay-toggle")
    screenshot(browser, "admin-schedules-viewer")
    # Refused for want of the permission, and without a CSRF token for that too.
    assert browser.execute_async_script(FORGED_POST, True, "guarded") == [403, False]
    assert browser.execute_async_script(FORGED_POST, False, "guarded") == [403, True]
    for page in ("relay/schedule/add/", "relay/schedule/guarded/change/"):
        browser.get(site["base"] + page)
        assert "403" in browser.title or "Forbidden" in browser.page_source, page
    guarded = stored(site, "guarded")
    assert (guarded.version, guarded.enabled) == (1, True)

    log_in(browser, site, "editor")  # the same forged POST without a token: refused for it
    browser.get(site["base"] + "relay/schedule/")
    assert browser.execute_async_script(FORGED_POST, False, "guarded") == [403, True]
    assert stored(site, "guarded").version == 1
