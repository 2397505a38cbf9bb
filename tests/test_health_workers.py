"""Workers record their own heartbeat: real ``celery worker`` and ``dramatiq`` processes.

Each worker beats from its main process while it runs (every 10 s, the first at start), so
``relay health --role …`` passes while it lives and fails once it is SIGKILLed and the given max
age has passed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from relay import open_backend
from relay.health import InstanceInfo
from tests.celery_integration.cluster import cluster
from tests.dramatiq.test_processes import combos, deploy  # noqa: F401 (deploy is a fixture)
from tests.support import services

pytestmark = pytest.mark.slow


def health(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", "health", "--backend", url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def instances_of(url: str, role: str) -> list[InstanceInfo]:
    try:
        backend = open_backend(url, read_only=True)
    except Exception:  # the store is made by the worker's first beat
        return []
    try:
        assert backend.capability == "lease"
        return [i for i in backend.instances() if i.role == role]
    finally:
        backend.close()


def wait_for(what: str, check: Any, logs: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{logs()}")


def dead_after_kill(url: str, role: str) -> None:
    time.sleep(2.5)
    probe = health(url, "--role", role, "--max-age", "2")
    assert probe.returncode == 1, probe.stdout + probe.stderr
    assert f"late: {role}" in probe.stdout


@pytest.mark.redis
def test_a_celery_worker_beats_while_it_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with cluster(tmp_path, services.require("redis"), url, {}) as c:
        worker = c.worker()
        (info,) = wait_for("the worker's heartbeat", lambda: instances_of(url, "worker"), c.logs)
        assert info.pid == worker.pid  # the worker's main process, not a pool child
        probe = health(url, "--role", "worker")
        assert probe.returncode == 0, probe.stdout + probe.stderr
        c.kill(worker)
    dead_after_kill(url, "worker")


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_a_dramatiq_worker_beats_while_it_runs(deploy: Any) -> None:  # noqa: F811
    d = deploy({"tick": {"every": 60}})
    worker = d.worker("worker", threads=1)
    role = "dramatiq-worker"
    (info,) = d.wait_for("the worker's heartbeat", lambda: instances_of(d.backend, role))
    assert info.pid != worker.pid  # a worker process, forked by the dramatiq command
    probe = health(d.backend, "--role", role)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    d.kill(worker)
    dead_after_kill(d.backend, role)
