"""A run taken over runs the stored schedule's version its record keeps, in real processes.

Issue 24, "No retroactive fire": a run already leased finishes with the definition it was leased
with (its task and arguments), and its record keeps the schedule version it ran.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from relay import Control
from relay.runs import run_id
from tests.support.procs import stop_all
from tests.test_stored_schedules_processes import runs, start, wait_for


@pytest.mark.slow
def test_a_run_taken_over_after_an_edit_runs_the_version_it_was_leased_with(
    lease_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    # A logs each run, then hangs in it until it is killed.
    a = start("a", lease_url, log, hang=True)
    procs = [a]
    try:
        with Control(lease_url) as control:
            wait_for(lambda: len(control.allowed_tasks()) == 1, 60)
            control.add_schedule("job", "echo", every=15, args=[1])
            wait_for(lambda: len(runs(log)) == 1, 60)
            ((first, args, version, name),) = runs(log)
            assert (args, version, name) == ([1], 1, "a")
            a.send_signal(signal.SIGKILL)
            a.wait(timeout=30)
            control.update_schedule("job", version=1, args=[2])
            procs.append(start("b", lease_url, log))
            wait_for(lambda: any(r[0] == first and r[3] == "b" for r in runs(log)), 60)
            wait_for(lambda: any(r[0] > first for r in runs(log)), 60)
            records = {r.id: r for r in control.runs("job")}
    finally:
        stop_all(procs)
    found = runs(log)
    # B took the run over and ran it as it was leased: version 1, its arguments.
    assert [r for r in found if r[0] == first] == [(first, [1], 1, "a"), (first, [1], 1, "b")]
    # The next slots run the edit (B may start late enough to run one before the takeover).
    later = [r for r in found if r[0] != first]
    assert later and all((args, version) == ([2], 2) for _, args, version, _ in later)
    assert all(slot > first for slot, *_ in later)
    taken = records[run_id("job", first)]
    assert taken.schedule_version == 1 and taken.attempt == 2
    assert all(records[run_id("job", slot)].schedule_version == 2 for slot, *_ in later)
