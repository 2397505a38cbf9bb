"""An instance never leases again a run it is still executing, even one whose heartbeat stalled.

Its runner renews the run; its sweeps and ticks pass it over. Another instance may take the run
over once the lease ran out on the store's clock (that is what a takeover is for); the instance
itself never does, so it never runs one run twice beside itself. Real SQLite store, real time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay import Scheduler
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider
from relay.events import Event, RunTakenOver
from tests.support.waiting import lease_ran_out


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[Scheduler[SQLiteLeaseBackend]]:
    store = SQLiteLeaseBackend(tmp_path / "relay.db")
    hour = time.time() // 3600 * 3600  # the clock stands just after a slot: a tick wins it
    instance = Scheduler(
        store, lease=1, heartbeat=0.3, owner="me", tick=3600, clock=lambda: hour + 1
    )
    # An hour between beats: the heartbeat stalls past the lease, as on a starved machine.
    instance.runner.heartbeat = 3600
    instance.job(every=3600, name="job", max_attempts=3)(lambda run: None)
    yield instance
    store.close()


def test_a_sweep_never_takes_over_a_run_its_own_runner_executes(
    scheduler: Scheduler[SQLiteLeaseBackend],
) -> None:
    seen: list[Event] = []
    scheduler.on(Event, seen.append)
    (won,) = scheduler.decider.tick()
    active = scheduler.runner.begin(won.run, max_attempts=3)
    assert active is not None
    assert scheduler.runner.holding() == {won.run.id}
    lease_ran_out(scheduler.backend, won.run.id)
    assert scheduler.decider.sweep() == []  # expired, but this instance still runs it
    scheduler.decider.forget_progress()  # a tick that re-reads the store passes it over too
    assert scheduler.decider.tick() == []
    assert not [e for e in seen if isinstance(e, RunTakenOver)]
    other = Decider(scheduler.backend, owner="other", lease=30)
    other.add(scheduler.jobs["job"])
    (taken,) = other.sweep()  # another instance does take it over
    assert taken.run.id == won.run.id and taken.run.token > won.run.token
    assert active.succeed() is None  # fenced off: the newer attempt owns the run
    assert scheduler.runner.holding() == frozenset()


def test_a_run_ended_here_is_swept_again_by_this_instance(
    scheduler: Scheduler[SQLiteLeaseBackend],
) -> None:
    (won,) = scheduler.decider.tick()
    active = scheduler.runner.begin(won.run, max_attempts=3)
    assert active is not None
    active.abandon()  # as if this process had died: it holds the run no longer
    assert scheduler.runner.holding() == frozenset()
    lease_ran_out(scheduler.backend, won.run.id)
    (again,) = scheduler.decider.sweep()
    assert again.run.id == won.run.id and again.run.attempt == 2
