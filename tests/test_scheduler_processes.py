"""The standalone scheduler across real processes: a graceful stop hands a run over at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import ROOT


def start(name: str, url: str, log: Path, **options: Any) -> subprocess.Popen[bytes]:
    args = {"name": name, "url": url, "log": str(log), **options}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.instance", json.dumps(args)], cwd=ROOT, env=env
    )


def events(log: Path) -> list[list[Any]]:
    """The log's events for the first run that started (later minutes' runs are not followed)."""
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [e for e in lines if e[0] == lines[0][0]]


def wait_for(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_sigterm_hands_the_running_run_to_another_instance(lease_url: str, tmp_path: Path) -> None:
    """With a 60 s lease, only a hand-over (not expiry) lets the other instance take it soon."""
    log = tmp_path / "runs.log"
    # A job every minute: its latest slot is always on time. The test follows the first run.
    options = {"lease": 60, "heartbeat": 5, "every": 60, "work": 4}
    first = start("first", lease_url, log, **options)
    try:
        wait_for(lambda: any(e[4] == "start" for e in events(log)), 30)
        second = start("second", lease_url, log, **options)
        try:
            time.sleep(2)  # the second instance is up, and sees the run held
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=30) == 0
            stopped = time.monotonic()
            wait_for(lambda: any(e[3] == "second" and e[4] == "done" for e in events(log)), 30)
            assert time.monotonic() - stopped < 20  # far sooner than the 60 s lease
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    started = [e for e in events(log) if e[4] == "start"]
    assert [(e[1], e[3]) for e in started] == [(1, "first"), (2, "second")]
    assert started[1][2] > started[0][2]  # the new attempt has a newer token
    assert [e[3] for e in events(log) if e[4] == "done"] == ["second"]
