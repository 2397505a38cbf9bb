"""Headless Chromium from Debian, driven by Selenium, for the tests that look at pages.

Nothing is downloaded at run time: the browser is ``/usr/bin/chromium`` and the driver
``/usr/bin/chromedriver`` (``apt-get install chromium chromium-driver``, as ``.ci/run`` does), given
to Selenium explicitly so that Selenium Manager never fetches one. Where they are missing, a test
that needs them is skipped with the reason, and fails under ``RELAY_REQUIRE_SERVICES=1`` (CI).

Each page a test looks at is saved as a screenshot under ``tests/artifacts/`` (ignored by git);
the path is printed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ARTIFACTS",
    "CHROMEDRIVER",
    "CHROMIUM",
    "chromium",
    "drawn",
    "log_in",
    "require_chromium",
    "screenshot",
    "wait_for_port",
]

CHROMIUM = Path(os.environ.get("RELAY_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("RELAY_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"))
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1000",
)  # fmt: skip


def require_chromium() -> None:
    """Skip (fail under ``RELAY_REQUIRE_SERVICES=1``) unless Chromium, its driver and Selenium
    are all installed."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    if not missing:
        return
    reason = (
        f"headless Chromium is not installed: missing {', '.join(missing)} "
        "(apt-get install chromium chromium-driver)"
    )
    if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
        pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A Selenium driver of a fresh headless Chromium with its own profile, quit afterwards."""
    require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="relay-test-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, name: str) -> Path:
    """Save the page (resized to show all of it, within limits) as ``tests/artifacts/NAME.png``."""
    ARTIFACTS.mkdir(exist_ok=True)
    width, height = driver.execute_script(
        "const e = document.documentElement;"
        "const boxes = [...document.querySelectorAll('.scroll')].map(s => s.scrollWidth + 220);"
        "return [Math.max(e.scrollWidth, ...boxes), e.scrollHeight + 20];"
    )
    driver.set_window_size(min(max(width, 1400), 5000), min(max(height, 800), 5000))
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


RUNS_JS = """
const box = e => { const b = e.getBoundingClientRect();
  return {x: b.left, right: b.right, y: b.top, bottom: b.bottom}; };
return {
  lanes: [...document.querySelectorAll('svg.chart rect.lane-bg')].map(box),
  labels: [...document.querySelectorAll('svg.labels text')].map(
    t => ({text: t.firstChild.textContent, ...box(t)})),
  jobs: [...document.querySelectorAll('g.lane')].map(g => g.dataset.job),
  runs: [...document.querySelectorAll('g.run')].map(g => ({
    id: g.dataset.run, job: g.closest('g.lane').dataset.job,
    cls: g.getAttribute('class'), marks: (g.dataset.marks || '').split(' ').filter(Boolean),
    title: g.querySelector('title').textContent,
    parts: [...g.children].filter(c => c.tagName !== 'title').map(
      c => ({cls: c.getAttribute('class'), ...box(c)})),
  })),
};
"""
"""JavaScript returning where the browser drew each lane, label, run and mark (in pixels)."""


def drawn(driver: Any) -> dict[str, Any]:
    """Where the browser laid out the timeline on the current page (see :data:`RUNS_JS`)."""
    found: dict[str, Any] = driver.execute_script(RUNS_JS)
    return found


def wait_for_port(port: int, server: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until ``server`` listens on ``port``; fail with its output if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, server.communicate()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port} after {timeout:g} s")


def log_in(driver: Any, admin: str, user: str, password: str) -> None:
    """Log ``user`` in through the Django admin's login page at ``admin`` (``…/admin/``)."""
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(admin + "login/")
    driver.find_element(By.NAME, "username").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    deadline = time.monotonic() + 20
    while "/login/" in driver.current_url and time.monotonic() < deadline:
        if driver.find_elements(By.CSS_SELECTOR, ".errornote"):
            break  # the login page came back with an error
        time.sleep(0.1)
    assert "/login/" not in driver.current_url, f"{user} could not log in"
