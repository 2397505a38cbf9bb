"""Stored schedules run by real ``relay-dramatiq`` schedulers and a real ``dramatiq`` worker.

A schedule of the schedulable actor ``echo`` (``tests.dramatiq.app``) is added, edited, paused,
resumed and removed while two schedulers race: each slot is enqueued and run once, with the
stored arguments as the actor's own; an edit is seen without a restart and never fires at once;
pause and remove stop new slots. An actor not allowed is reported not runnable and never sent.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from relay import Control
from relay.runs import parse_run_id
from relay.stored import Schedule
from tests.dramatiq.procs import Deployment
from tests.dramatiq.test_processes import combos, deploy, settled
from tests.support.event_log import read_events

__all__ = ["deploy"]  # the fixture, shared with tests/dramatiq/test_processes.py

pytestmark = pytest.mark.slow

MARGIN = timedelta(seconds=2)
"""Slots this close after a change may still be decided by the definition before it: the change
reaches each scheduler at its next tick, and a loaded machine delays ticks."""


def stored_runs(d: Deployment, actor: str = "echo") -> list[tuple[datetime, list[Any], str]]:
    """(slot, args, run id) of each stored-schedule call the actor reported."""
    return [
        (parse_run_id(e["run"])[1], e["args"], e["run"])
        for e in d.events("stored")
        if e["actor"] == actor
    ]


def changed_at(schedule: Schedule) -> datetime:
    """When the change that made this version was made, on the store's clock."""
    assert schedule.updated_at is not None
    return schedule.updated_at


def allowing(control: Control, task: str) -> int:
    """How many live instances allow ``task``."""
    return sum(task in tasks for tasks in control.allowed_tasks().values())


@pytest.mark.parametrize(
    "deploy", combos(["redis", "rabbitmq"], every_backend_on="redis"), indirect=True
)
def test_a_stored_schedule_runs_once_per_slot_and_follows_each_change(deploy: Any) -> None:
    d: Deployment = deploy({})
    d.stored = True
    worker = d.worker("worker", threads=2)
    schedulers = [d.scheduler(f"scheduler{i}") for i in range(2)]
    with Control(d.backend) as control:
        d.wait_for("both schedulers to allow echo", lambda: allowing(control, "echo") == 2)
        added = control.add_schedule("tick", "echo", every=1, args=[1], kwargs={"word": "a"})
        d.wait_for("runs of version 1", lambda: len(stored_runs(d)) >= 3)
        edited = control.update_schedule("tick", version=1, args=[2])
        d.wait_for("runs of version 2", lambda: sum(r[1] == [2] for r in stored_runs(d)) >= 3)
        paused = control.update_schedule("tick", version=2, enabled=False)
        time.sleep(4)
        resumed = control.update_schedule("tick", version=3, enabled=True)
        back = changed_at(resumed)
        d.wait_for("a run after the resume", lambda: any(r[0] > back for r in stored_runs(d)))
        control.remove_schedule("tick", version=4)
        removed = control.schedule_history("tick")[-1].at
        time.sleep(3)
    for proc in schedulers:
        assert d.stop(proc) == 0, d.logs()
    d.wait_for("every run to finish", lambda: settled(d, "tick"))
    d.stop(worker)

    found = stored_runs(d)
    slots = Counter(slot for slot, _, _ in found)
    assert [s for s, n in slots.items() if n > 1] == [], d.logs()  # each slot once
    assert max(Counter(d.enqueued()).values()) == 1  # and enqueued once
    assert {e["kwargs"]["word"] for e in d.events("stored")} == {"a"}
    versions = {e["run"]: e["version"] for e in d.events("stored")}  # from the run header
    for slot, args, run in found:
        assert slot > changed_at(added)  # never at once, never a slot before the add
        ran = {added.version} if args == [1] else {edited.version, resumed.version}
        assert versions[run] in ran  # each run sees the version it was won with
        if slot <= changed_at(edited):
            assert args == [1]
        if slot > changed_at(edited) + MARGIN:
            assert args == [2]
        assert not changed_at(paused) + MARGIN < slot <= changed_at(resumed)
        assert slot <= removed + MARGIN
    assert all(r.state.final for r in d.runs("tick"))
    assert [
        r.id for r in d.runs("tick") if versions.get(r.id, r.schedule_version) != r.schedule_version
    ] == []


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_an_actor_not_allowed_is_reported_and_never_sent_until_a_scheduler_allows_it(
    deploy: Any,
) -> None:
    d: Deployment = deploy({})
    d.stored = True
    d.worker("worker", threads=2)
    d.scheduler("scheduler-a")
    with Control(d.backend) as control:
        d.wait_for("the scheduler to allow echo", lambda: allowing(control, "echo") == 1)
        assert allowing(control, "other") == 0
        control.add_schedule("sneaky", "other", every=1, args=[5], force=True)
        control.add_schedule("fine", "echo", every=1, args=[6])
        d.wait_for("runs of the allowed actor", lambda: len(stored_runs(d)) >= 3)
        refused = read_events(d.relay_events, "schedule_not_runnable")
        assert [e["relay_schedule"] for e in refused] == ["sneaky"], refused
        assert "does not allow task 'other'" in refused[0]["message"]
        assert "allow it with relay_dramatiq.schedulable('other')" in refused[0]["message"]
        assert stored_runs(d, "other") == [] and d.runs("sneaky") == []

        d.scheduler("scheduler-b", "--schedulable", "other")  # the CLI's way to allow an actor
        d.wait_for("scheduler-b to allow other", lambda: allowing(control, "other") == 1)
        d.wait_for("runs of other", lambda: len(stored_runs(d, "other")) >= 2)
    assert {tuple(args) for _, args, _ in stored_runs(d, "other")} == {(5,)}
    assert len(read_events(d.relay_events, "schedule_not_runnable")) == 1  # once per version
