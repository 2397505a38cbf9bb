"""The control plane across real scheduler processes: a pause reaches every instance at once, and
a run triggered from the command line runs once however many instances sweep for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from relay import Control, RunState
from relay.runs import parse_run_id
from tests.support.procs import ROOT, stop_all
from tests.test_scheduler_processes import start, wait_for


def lines(log: Path) -> list[list[Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@contextmanager
def instances(url: str, log: Path, count: int, **options: Any) -> Iterator[None]:
    procs = [start(f"i{n}", url, log, **options) for n in range(count)]
    try:
        yield
    finally:
        stop_all(procs)


@pytest.mark.slow
def test_a_pause_is_obeyed_by_every_instance_at_its_next_tick(
    lease_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    with instances(lease_url, log, 3, lease=5, heartbeat=1, every=1, work=0.05):
        wait_for(lambda: len({e[0] for e in lines(log) if e[4] == "done"}) >= 2, 60)
        with Control(lease_url) as control:
            assert control.pause("job", "test", by="the test")
            (status,) = control.jobs()
        paused_at = status.paused_at
        assert paused_at is not None and status.paused_by == "the test"
        time.sleep(3)  # three slots pass, each decided by three instances ticking every 0.1 s
        started = [parse_run_id(e[0])[1] for e in lines(log) if e[4] == "start"]
        # No run whose slot came after the pause started, on any instance.
        assert started and max(started) < paused_at
        with Control(lease_url) as control:
            records = control.backend.runs("job", limit=10)  # type: ignore[union-attr]
            skipped = [r for r in records if r.scheduled_for > paused_at]
            assert len(skipped) >= 2
            assert {(r.state, r.reason) for r in skipped} == {(RunState.SKIPPED, "paused")}
            control.resume("job")
        count = len(started)
        wait_for(lambda: len([e for e in lines(log) if e[4] == "start"]) > count, 20)


@pytest.mark.slow
def test_a_run_triggered_from_the_cli_runs_once_among_three_instances(
    lease_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    # A job every hour: its only run in the test is the manual one (and possibly the latest slot).
    with instances(lease_url, log, 3, lease=5, heartbeat=0.5, every=3600, work=0.5):
        wait_for(lambda: _registered(lease_url), 30)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAY_BACKEND": lease_url}
        done = subprocess.run(
            [sys.executable, "-m", "relay.cli", "trigger", "job"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[0]
        assert run_id.startswith("job@manual:")
        wait_for(lambda: any(e[0] == run_id and e[4] == "done" for e in lines(log)), 30)
        time.sleep(2)  # every instance swept a few more times
    starts = [e for e in lines(log) if e[0] == run_id and e[4] == "start"]
    assert len(starts) == 1, starts
    with Control(lease_url) as control:
        (record,) = [r for r in control.backend.runs("job") if r.id == run_id]  # type: ignore[union-attr]
    assert record.state is RunState.SUCCEEDED and record.attempt == 1


def _registered(url: str) -> bool:
    with Control(url) as control:
        return [s.name for s in control.jobs()] == ["job"]
