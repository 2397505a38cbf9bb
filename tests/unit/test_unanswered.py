"""An acquire the store did but never answered, on a real SQLite store.

A wrapper does the step, then raises ``BackendUnavailable`` as a client does when the primary is
killed (or the connection cut) before its reply arrives. The Redis failover races meet this for
real, rarely: without the hand-back, such a run waited for its lease to run out and the grace
after the outage (up to two leases) before it was taken over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from relay.backends.sqlite import SQLiteLeaseBackend
from relay.contract import AcquireRequest, AcquireResult, Outcome
from relay.engine import Decider
from relay.errors import BackendUnavailable, NotAcknowledged
from relay.jobs import Job
from relay.runs import RunState
from relay.schedules import make_schedule

UTC = timezone.utc
SLOT = datetime(2026, 12, 1, 12, tzinfo=UTC)
NOW = SLOT.timestamp() + 30


class AnswerLost:
    """A lease backend whose next ``acquire_many``, once :attr:`armed`, is done (or not) and
    then raises :attr:`error`, as if the answer never came; later calls are answered."""

    def __init__(self, backend: SQLiteLeaseBackend) -> None:
        self.backend = backend
        self.armed: bool | None = None
        """None: answered; True: done, not answered; False: not done, not answered."""
        self.error: BackendUnavailable = BackendUnavailable("the connection closed first")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        if self.armed is None:
            return self.backend.acquire_many(requests)
        if self.armed:
            self.backend.acquire_many(requests)
        self.armed = None
        raise self.error


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend.from_url(f"sqlite:///{tmp_path / 'relay.db'}")
    yield backend
    backend.close()


def decider(backend: Any, owner: str = "a") -> Decider:
    """An instance at 12:00:30 whose job (every minute) was decided up to 11:59, as a running
    instance's is: its tick asks for the slot of 12:00."""
    now = [NOW - 60]
    made = Decider(backend, owner=owner, lease=30, clock=lambda: now[0])
    made.add(Job(name="job", schedule=make_schedule(cron=None, every=60, tz=None), handler=print))
    for won in made.tick():
        backend.finish(won.run.id, won.run.token, succeeded=True)
    now[0] = NOW
    return made


def test_a_run_leased_by_an_unanswered_acquire_is_handed_back_and_leased_at_the_next_sweep(
    store: SQLiteLeaseBackend, caplog: pytest.LogCaptureFixture
) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = True
    with pytest.raises(BackendUnavailable):
        a.tick()
    leased = store.runs("job")[0]
    assert (leased.state, leased.owner) == (RunState.RUNNING, "a")  # a holds it, not knowing
    with caplog.at_level(logging.WARNING, logger="relay.engine"):
        assert a.tick() == []  # asked again: held, so a's, unstarted: handed back
    record = store.runs("job")[0]
    assert (record.state, record.attempt, record.reason) == (RunState.PENDING, 0, "released")
    assert "its answer was lost" in caplog.text
    (won,) = decider(store, owner="b").sweep()  # any instance, before the lease would run out
    assert (won.run.attempt, won.run.token > leased.token) == (1, True)


def test_a_run_another_instance_leased_is_left_to_it(store: SQLiteLeaseBackend) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = False
    with pytest.raises(BackendUnavailable):
        a.tick()  # not done: b wins the run
    (won,) = decider(store, owner="b").tick()
    assert a.tick() == []
    record = store.runs("job")[0]
    assert (record.state, record.owner, record.token) == (RunState.RUNNING, "b", won.run.token)


def test_a_started_run_is_left_to_its_lease(store: SQLiteLeaseBackend) -> None:
    """A run this owner started is left alone: whether a handler runs it is not the decider's
    to know (a worker of the same owner may)."""
    a = decider(lost := AnswerLost(store))
    lost.armed = True
    with pytest.raises(BackendUnavailable):
        a.tick()
    leased = store.runs("job")[0]
    store.start(leased.id, leased.token, "a", 30)
    assert a.tick() == []
    record = store.runs("job")[0]
    assert (record.state, record.token) == (RunState.RUNNING, leased.token)


def test_the_next_answer_forgets_the_unanswered_runs(store: SQLiteLeaseBackend) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = True
    with pytest.raises(BackendUnavailable):
        a.tick()
    a.tick()
    assert a._unanswered == set()
    assert (
        store.acquire(AcquireRequest("job", datetime(2026, 12, 1, 12, tzinfo=UTC), "c", 30)).outcome
        is Outcome.WON
    )


def test_a_first_tick_unanswered_asks_for_its_run_again(store: SQLiteLeaseBackend) -> None:
    """A job not decided yet plans from its latest record, which may be the unknown lease."""
    lost = AnswerLost(store)
    lost.armed = True
    a = Decider(lost, owner="a", lease=30, clock=lambda: NOW)
    a.add(Job(name="job", schedule=make_schedule(cron=None, every=60, tz=None), handler=print))
    with pytest.raises(BackendUnavailable):
        a.tick()
    assert a.tick() == []
    (record,) = store.runs("job")
    assert (record.state, record.reason) == (RunState.PENDING, "released")


def test_a_cluster_node_that_failed_in_a_call_not_acknowledged_is_asked_again(
    store: SQLiteLeaseBackend,
) -> None:
    """On Redis Cluster a node that failed makes the call raise NotAcknowledged with only the
    other nodes' wins in it (handed back at once): the failed node may have done its part."""
    a = decider(lost := AnswerLost(store))
    lost.armed, lost.error = True, NotAcknowledged("a node failed", [])
    with pytest.raises(NotAcknowledged):
        a.tick()
    assert a.tick() == []
    record = store.runs("job")[0]
    assert (record.state, record.reason) == (RunState.PENDING, "released")
