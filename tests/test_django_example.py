"""``examples/django_project`` does what its README says, with the README's commands.

Set up (``migrate``, ``createsuperuser``, ``check``), then the Dramatiq variant (a worker and two
``manage.py relay_dramatiq`` schedulers) and the Celery variant (a worker and two beats), each
run once per slot, in the project's own SQLite database (``RELAY = {"BACKEND": "django"}``); then
the admin's Relay pages list the jobs of both, in headless Chromium.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from relay import RunState, open_backend
from tests.support import services
from tests.support.backends import unique
from tests.support.browser import (
    chromium,
    log_in,
    require_chromium,
    screenshot,
    wait_for_port,
)
from tests.support.ports import free_port
from tests.support.procs import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis]

EXAMPLE = ROOT / "examples" / "django_project"


class Project:
    """The example project with its own database and Redis namespace."""

    def __init__(self, folder: Path) -> None:
        self.db = folder / "db.sqlite3"
        self.namespace = unique("relay_t_djex")
        self.env = {
            **os.environ,
            "EXAMPLE_DB": str(self.db),
            "EXAMPLE_NAMESPACE": self.namespace,
            "EXAMPLE_BROKER_URL": services.SERVICES["redis"].url,
            "DJANGO_SUPERUSER_PASSWORD": "example-pw",
        }
        self.env.pop("RELAY_BACKEND", None)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], cwd=EXAMPLE, env=self.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, *args], cwd=EXAMPLE, env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def runs(self, job: str) -> list[Any]:
        store = open_backend(f"sqlite:///{self.db}", read_only=True)
        assert store.capability == "lease"
        try:
            return store.runs(job, 100)
        finally:
            store.close()


def play(procs: list[subprocess.Popen[str]], seconds: float) -> str:
    """Let the processes run, stop them with SIGTERM, and return their output."""
    time.sleep(seconds)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    output = ""
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        output += out
    return output


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    services.require("redis")
    p = Project(tmp_path_factory.mktemp("example"))
    # Set up here, not in a test: under pytest-xdist each worker running a test of this module
    # has a project of its own, and no other test of the module need run there first.
    for args in (
        ["manage.py", "migrate", "-v", "0"],
        ["manage.py", "createsuperuser", "--noinput", "--username", "admin",
         "--email", "admin@example.com"],
    ):  # fmt: skip
        done = p.run(*args)
        assert done.returncode == 0, done.stderr
    try:
        yield p
    finally:
        client = redis.Redis.from_url(services.SERVICES["redis"].url)
        keys = list(client.scan_iter(match=f"*{p.namespace}*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_set_up_and_check(project: Project) -> None:
    # The fixture ran migrate and createsuperuser, and checked that both succeeded.
    check = project.run("manage.py", "check")
    assert check.returncode == 0 and "no issues" in check.stdout, check.stdout + check.stderr


# Each variant runs once per pytest worker that needs it (a module fixture): its test checks
# what it did, and the admin test lists the jobs it registered, whichever worker runs what.
Played = tuple[list[subprocess.Popen[str]], str]


@pytest.fixture(scope="module")
def dramatiq_variant(project: Project) -> Played:
    """A Dramatiq worker and two ``manage.py relay_dramatiq`` schedulers, for 12 s."""
    actors = ["project.dramatiq", "reports.actors"]
    procs = [project.start("-m", "dramatiq", *actors, "-p", "1", "-t", "2")]
    procs += [project.start("manage.py", "relay_dramatiq", *actors) for _ in range(2)]
    return procs, play(procs, 12)


@pytest.fixture(scope="module")
def celery_variant(project: Project) -> Played:
    """A Celery worker and two beats, for 20 s."""
    procs = [project.start("-m", "celery", "-A", "project", "worker", "--concurrency", "1",
                           "--loglevel", "INFO")]  # fmt: skip
    procs += [
        project.start("-m", "celery", "-A", "project", "beat", "--loglevel", "INFO",
                      "--schedule", str(project.db.with_name(f"beat-{n}")))
        for n in range(2)
    ]  # fmt: skip
    return procs, play(procs, 20)


def test_the_dramatiq_variant_runs_each_slot_once(
    project: Project, dramatiq_variant: Played
) -> None:
    procs, output = dramatiq_variant
    ran = Counter(re.findall(r"cache refreshed by run (refresh_cache@\S+)", output))
    assert len(ran) >= 2 and max(ran.values()) == 1, output
    stored = {r.id: r for r in project.runs("refresh_cache")}
    assert all(stored[run].state is RunState.SUCCEEDED for run in ran), output
    assert all(proc.returncode == 0 for proc in procs[1:]), output


def test_the_celery_variant_runs_each_slot_once(project: Project, celery_variant: Played) -> None:
    _, output = celery_variant
    ran = Counter(re.findall(r"cache refreshed by run (refresh-cache@\S+)", output))
    assert ran and max(ran.values()) == 1, output
    stored = {r.id: r for r in project.runs("refresh-cache")}
    assert all(stored[run].state is RunState.SUCCEEDED for run in ran), output


def test_the_admin_shows_both_variants_jobs(
    project: Project, dramatiq_variant: Played, celery_variant: Played
) -> None:
    require_chromium()
    port = free_port()
    server = project.start("manage.py", "runserver", "--noreload", f"127.0.0.1:{port}")
    try:
        wait_for_port(port, server)
        admin = f"http://127.0.0.1:{port}/admin/"
        with chromium() as driver:
            log_in(driver, admin, "admin", "example-pw")
            driver.get(admin + "relay/job/")
            jobs = driver.execute_script(
                "return [...document.querySelectorAll('tr.relay-job')].map(r => r.dataset.job)"
            )
            assert {"refresh_cache", "refresh-cache"} <= set(jobs), jobs
            screenshot(driver, "example-admin-jobs")
            driver.get(admin + "relay/run/timeline/")
            lanes = driver.execute_script(
                "return [...document.querySelectorAll('g.lane')].map(g => g.dataset.job)"
            )
            assert {"refresh_cache", "refresh-cache"} <= set(lanes), lanes
            screenshot(driver, "example-admin-timeline")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
