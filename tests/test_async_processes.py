"""Instances served inside asyncio apps, as real processes: SIGKILL and SIGTERM mid-coroutine.

Each process runs ``tests.support.async_instance`` (an ``async def`` job served with ``async with
scheduler``). The test follows the first run of a job due every minute, as
``test_scheduler_processes.py`` does for plain handlers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay import RunState, open_backend
from tests.support.procs import ROOT


def start(name: str, url: str, log: Path, **options: Any) -> subprocess.Popen[bytes]:
    args = {"name": name, "url": url, "log": str(log), "every": 60, **options}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'shared'}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.async_instance", json.dumps(args)], cwd=ROOT, env=env
    )


def events(log: Path) -> list[list[Any]]:
    """The log's events for the first run that started (later minutes' runs are not followed)."""
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [e for e in lines if e[0] == lines[0][0]]


def wait_for(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def state(url: str, run: str) -> RunState:
    store = open_backend(url)
    try:
        assert store.capability == "lease"
        (record,) = [r for r in store.runs("job", limit=10) if r.id == run]
        return record.state
    finally:
        store.close()


def stop_all(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_killed_instance_s_coroutine_run_is_taken_over(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path / 'relay.db'}", tmp_path / "runs.log"
    options = {"lease": 5, "heartbeat": 0.5, "work": 3}
    procs = {name: start(name, url, log, **options) for name in ("a", "b")}
    try:
        wait_for(lambda: any(e[4] == "start" for e in events(log)), 60)
        winner = events(log)[0][3]
        procs[winner].send_signal(signal.SIGKILL)
        procs[winner].wait(timeout=30)
        survivor = "b" if winner == "a" else "a"
        wait_for(lambda: any(e[3] == survivor and e[4] == "done" for e in events(log)), 60)
        procs[survivor].send_signal(signal.SIGTERM)
        assert procs[survivor].wait(timeout=60) == 0
    finally:
        stop_all(*procs.values())
    started = [(e[1], e[3]) for e in events(log) if e[4] == "start"]
    assert started == [(1, winner), (2, survivor)]
    assert [e[3] for e in events(log) if e[4] == "done"] == [survivor]
    assert state(url, events(log)[0][0]) is RunState.SUCCEEDED


@pytest.mark.slow
def test_sigterm_cancels_the_coroutine_and_hands_its_run_over(tmp_path: Path) -> None:
    """With a 60 s lease, only a hand-over (not expiry) lets the other instance take it soon."""
    url, log = f"sqlite:///{tmp_path / 'relay.db'}", tmp_path / "runs.log"
    options = {"lease": 60, "heartbeat": 5, "work": 4, "stop_timeout": 0.5}
    first = start("first", url, log, **options)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: any(e[4] == "start" for e in events(log)), 60)
        second = start("second", url, log, **options)
        time.sleep(2)  # the second instance is up, and sees the run held
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        stopped = time.monotonic()
        wait_for(lambda: any(e[3] == "second" and e[4] == "done" for e in events(log)), 40)
        assert time.monotonic() - stopped < 30  # far sooner than the 60 s lease
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
    finally:
        stop_all(first, *([second] if second else []))

    def of(name: str) -> list[tuple[int, str]]:
        return [(e[1], e[4]) for e in events(log) if e[3] == name]

    assert of("first") == [(1, "start"), (1, "cancelled")]  # CancelledError in the coroutine
    assert of("second") == [(2, "start"), (2, "done")]
    assert state(url, events(log)[0][0]) is RunState.SUCCEEDED
