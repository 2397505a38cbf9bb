"""Stored schedules changed at runtime, seen by three real instance processes on one store.

A schedule is added, edited, paused, resumed and removed while three instances run: each slot runs
once among them, an edit never fires a slot before it (nor at once), a paused or removed schedule
starts no slot, and a resume does not catch up the slots it missed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relay import Control
from relay.runs import parse_run_id
from tests.support.procs import ROOT, stop_all

MARGIN = timedelta(seconds=2)
"""Slots this close after a change may still be decided by the definition before it: the change
reaches each instance at its next tick, and a loaded machine delays ticks."""


def start(name: str, url: str, log: Path, **options: Any) -> subprocess.Popen[bytes]:
    args = {"name": name, "url": url, "log": str(log), **options}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.stored_instance", json.dumps(args)],
        cwd=ROOT, env=env,
    )  # fmt: skip


def runs(log: Path) -> list[tuple[datetime, list[Any], int, str]]:
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [(parse_run_id(rid)[1], args, version, name) for rid, args, version, name, _ in lines]


def wait_for(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_three_instances_apply_each_change_and_run_each_slot_once(
    lease_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    procs = [start(f"i{n}", lease_url, log) for n in range(3)]
    try:
        with Control(lease_url) as control:
            wait_for(lambda: len(control.allowed_tasks()) == 3, 60)
            added = control.add_schedule("tick", "echo", every=1, args=[1])
            wait_for(lambda: len(runs(log)) >= 3, 30)
            edited = control.update_schedule("tick", version=1, args=[2])
            wait_for(lambda: any(r[2] == 2 for r in runs(log)), 30)
            wait_for(lambda: len([r for r in runs(log) if r[2] == 2]) >= 3, 30)
            # Each slot is a race whose winner may win a streak on a loaded machine (it once
            # won the whole test's 9): run until a second instance has won one.
            wait_for(lambda: len({name for *_, name in runs(log)}) >= 2, 30)
            paused = control.update_schedule("tick", version=2, enabled=False)
            time.sleep(4)
            resumed = control.update_schedule("tick", version=3, enabled=True)
            wait_for(lambda: any(r[2] == 4 for r in runs(log)), 30)
            time.sleep(2)
            control.remove_schedule("tick", version=4)
            removed = control.schedule_history("tick")[-1].at
            time.sleep(3)
    finally:
        stop_all(procs)
    found = runs(log)
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    slots = Counter(slot for slot, *_ in found)
    assert [s for s, n in slots.items() if n > 1] == []  # each slot once among the instances
    assert len({name for *_, name in found}) >= 2  # the instances shared the work
    for slot, args, version, _ in found:
        changed = {1: added, 2: edited, 4: resumed}[version].updated_at
        assert changed is not None and slot > changed  # never a slot from before the change
        assert args == ([1] if version == 1 else [2])
        if version == 1:
            assert slot <= edited.updated_at + MARGIN  # type: ignore[operator]
        assert not paused.updated_at + MARGIN < slot <= resumed.updated_at  # type: ignore[operator]
        assert slot <= removed + MARGIN


def test_a_code_job_with_a_stored_schedules_name_refuses_to_start(
    lease_url: str, tmp_path: Path
) -> None:
    with Control(lease_url) as control:
        control.add_schedule("nightly", "echo", every=3600, force=True)
    log = tmp_path / "refused.log"
    proc = start("clash", lease_url, log, code_job="nightly")
    try:
        assert proc.wait(timeout=60) == 3
    finally:
        stop_all([proc])
    assert "code job(s) 'nightly'" in log.read_text()
    assert "stored schedule" in log.read_text()
