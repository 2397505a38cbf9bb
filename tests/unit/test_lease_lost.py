"""The running half through a store that stops answering: let go after a lease, finish after it.

The store is a real SQLite file another connection locks (``BEGIN EXCLUSIVE``): every write then
fails with "database is locked" after ``busy_timeout``, as a store that does not answer would.
Leases are timed on this process's monotonic clock, so these tests wait in real time.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from relay import LeaseLost, RunState
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import ActiveRun, Decider, FinishLimit, Runner
from relay.events import Event, EventBus, FencedOff, RunAbandoned, RunLeaseLost, RunSucceeded
from relay.jobs import make_job

LEASE = 1.0
DEADLINE = 0.05  # busy_timeout: how long one call waits for the locked store


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "relay.db"


@pytest.fixture
def store(path: Path) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend(path, busy_timeout=DEADLINE)
    yield backend
    backend.close()


@pytest.fixture
def seen() -> list[Event]:
    return []


@pytest.fixture
def runner(store: SQLiteLeaseBackend, seen: list[Event]) -> Runner:
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    return Runner(store, owner="a:w", lease=LEASE, heartbeat=0.1, events=bus)


@contextmanager
def store_silent(path: Path) -> Iterator[None]:
    """The store answers no write while the block runs."""
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")


def begin(store: SQLiteLeaseBackend, runner: Runner) -> ActiveRun:
    decider = Decider(store, owner="a", lease=LEASE)
    decider.add(make_job(store, name="job", every=60))
    [won] = decider.tick()
    active = runner.begin(won.run)
    assert active is not None
    return active


def of(seen: list[Event], kind: type[Event]) -> list[Event]:
    return [e for e in seen if isinstance(e, kind)]


def test_a_lease_not_renewed_in_time_is_let_go_and_the_handler_told(
    path: Path, store: SQLiteLeaseBackend, runner: Runner, seen: list[Event]
) -> None:
    active = begin(store, runner)
    with store_silent(path):
        silent_from = time.monotonic()
        assert active.run.lost.wait(10), "run.lost was never set"
        took = time.monotonic() - silent_from
        with pytest.raises(LeaseLost, match="lease could not be renewed"):
            active.run.check()
    # Within lease + deadline of the last renewal (a heartbeat before the lock at most), with
    # room for a loaded machine; never before the lease's time ran out.
    assert took < LEASE + DEADLINE + 1.5
    [event] = of(seen, RunLeaseLost)
    assert isinstance(event, RunLeaseLost)
    assert event.silent_for >= LEASE and event.lease == LEASE
    assert event.token == active.run.token and "locked" in event.error
    assert "run.lost" in event.message()
    assert active.let_go and not active.lost
    # Nobody took the run over: the finish still carries the current token, and is recorded.
    assert active.succeed() is RunState.SUCCEEDED
    assert of(seen, FencedOff) == []
    assert [e.type for e in seen] == ["started", "lease_lost", "succeeded"]


def test_renewals_failing_for_less_than_a_lease_keep_the_run(
    path: Path, store: SQLiteLeaseBackend, runner: Runner, seen: list[Event]
) -> None:
    active = begin(store, runner)
    with store_silent(path):
        time.sleep(LEASE / 3)
    time.sleep(LEASE * 1.5)  # renewed again since: the lease never ran out
    assert not active.run.lost.is_set()
    assert active.succeed() is RunState.SUCCEEDED
    assert of(seen, RunLeaseLost) == []


def test_a_finish_is_retried_through_an_outage_longer_than_the_lease(
    path: Path, store: SQLiteLeaseBackend, runner: Runner, seen: list[Event]
) -> None:
    active = begin(store, runner)
    outcome: list[RunState | None] = []
    with store_silent(path):
        finishing = threading.Thread(target=lambda: outcome.append(active.succeed()))
        finishing.start()
        time.sleep(LEASE * 2)
        assert finishing.is_alive()  # still trying: it gave nothing up
    finishing.join(10)
    # Retried every half heartbeat at most: answered within a few of them once the store is back.
    assert outcome == [RunState.SUCCEEDED]
    assert len(of(seen, RunSucceeded)) == 1 and of(seen, RunAbandoned) == []
    [record] = store.runs("job")
    assert record.state is RunState.SUCCEEDED and record.token == active.run.token


def test_a_stopping_host_gives_a_finish_up_after_its_limit(
    path: Path, store: SQLiteLeaseBackend, runner: Runner, seen: list[Event]
) -> None:
    active = begin(store, runner)
    with store_silent(path):
        outcome: list[RunState | None] = []
        finishing = threading.Thread(target=lambda: outcome.append(active.succeed()))
        finishing.start()
        time.sleep(0.5)
        stopped = time.monotonic()
        runner.stop_finishing(0.5)
        finishing.join(10)
        gave_up_after = time.monotonic() - stopped
    assert outcome == [None]
    assert 0.5 <= gave_up_after < 0.5 + 1.5
    [abandoned] = of(seen, RunAbandoned)
    assert isinstance(abandoned, RunAbandoned)
    assert (abandoned.operation, abandoned.outcome) == ("finish", "succeeded")


def test_runners_sharing_a_finish_limit_give_up_together(
    path: Path, store: SQLiteLeaseBackend, seen: list[Event]
) -> None:
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    limit = FinishLimit()  # one per host: a Dramatiq worker's threads each have a runner
    runners = [
        Runner(store, owner=f"w{i}", lease=LEASE, heartbeat=0.1, events=bus, finish_limit=limit)
        for i in range(2)
    ]
    decider = Decider(store, owner="a", lease=LEASE)
    for name in ("one", "two"):
        decider.add(make_job(store, name=name, every=60))
    actives = [r.begin(won.run) for r, won in zip(runners, decider.tick(), strict=True)]
    outcomes: list[RunState | None] = []
    with store_silent(path):
        threads = [
            threading.Thread(target=lambda a=a: outcomes.append(a.succeed()))  # type: ignore[misc]
            for a in actives
            if a is not None
        ]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        limit.stop_within(0.3)  # the worker stops
        for thread in threads:
            thread.join(10)
    assert outcomes == [None, None]
    assert len(of(seen, RunAbandoned)) == 2
