"""What the console's tests share: a store of each kind (SQLite, PostgreSQL, Redis) with a live
instance running on it, and a client of the console over that store."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay import Control
from tests.console.instance import HOSTILE
from tests.support.backends import LEASE_BACKENDS, params
from tests.support.procs import ROOT

CONSOLE_BACKENDS = {name: LEASE_BACKENDS[name] for name in ("sqlite", "postgres", "redis")}
"""The stores the console is tested against."""
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}


def start_instance(url: str, folder: Path, name: str = "inst-a") -> subprocess.Popen[bytes]:
    """A live instance (``tests.console.instance``) on ``url``."""
    args = {"url": url, "name": name, "log": str(folder / f"{name}.log")}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.console.instance", json.dumps(args)], cwd=ROOT, env=ENV
    )


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it does not stop."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate: Any, timeout: float = 60, what: str = "") -> None:
    """Poll ``predicate`` until it is true (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.1)


def ready(url: str) -> bool:
    """The instance registered both jobs, ran ``tick`` once, and allows ``echo``."""
    with Control(url) as control:
        names = {s.name: s for s in control.jobs()}
        allowed = control.allowed_tasks()
    tick = names.get("tick")
    return (
        HOSTILE in names
        and tick is not None
        and tick.last_run is not None
        and any("echo" in tasks for tasks in allowed.values())
    )


@pytest.fixture(scope="module", params=params(CONSOLE_BACKENDS))
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A store of each kind with a live instance running: ``url``, ``folder``, ``backend``."""
    factory, _ = CONSOLE_BACKENDS[request.param]
    folder = tmp_path_factory.mktemp(f"console-{request.param}")
    with factory(folder) as url:
        proc = start_instance(url, folder)
        try:
            wait_for(lambda: proc.poll() is None and ready(url), 90, "the live instance")
            yield {"url": url, "folder": folder, "backend": request.param, "instance": proc}
        finally:
            stop(proc)


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = CSRF.search(html)
    assert found, "no form with a CSRF token on the page"
    return found[1]
