"""An acquire the store did but never answered, on a real SQLite store.

A wrapper does the step, then raises ``BackendUnavailable`` as a client does when the primary is
killed (or the connection cut) before its reply arrives. The run is then leased to an owner that
does not know it; without the hand-back at the next sweep, it waited for its lease to run out and
the grace after the outage (up to two leases) before it was taken over.
``tests/backends/test_deadlines.py`` loses the answer for real, through a proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import relay
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.contract import AcquireRequest, AcquireResult
from relay.engine import Decider, Loop, Won, deciding
from relay.errors import BackendUnavailable, NotAcknowledged
from relay.jobs import Job
from relay.runs import Run, RunState
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


def test_a_run_leased_by_an_unanswered_acquire_is_handed_back_and_leased_by_the_next_sweep(
    store: SQLiteLeaseBackend, caplog: pytest.LogCaptureFixture
) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = True
    with pytest.raises(BackendUnavailable):
        a.tick()
    leased = store.runs("job")[0]
    assert (leased.state, leased.owner) == (RunState.RUNNING, "a")  # a holds it, not knowing
    with caplog.at_level(logging.WARNING, logger="relay.engine"):
        (won,) = a.sweep()
    assert "its answer was lost" in caplog.text and "handed back" in caplog.text
    assert won.run.id == leased.id
    assert (won.run.attempt, won.run.token > leased.token) == (1, True)  # no attempt spent
    assert a._unanswered == set()


def test_a_run_found_held_at_the_next_tick_is_handed_back_by_the_sweep(
    store: SQLiteLeaseBackend,
) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = True
    with pytest.raises(BackendUnavailable):
        a.tick()
    assert a.tick() == []  # the run is held (by a, which cannot tell): still unanswered
    (won,) = a.sweep()
    assert won.run.attempt == 1


def test_after_an_outage_in_a_loop_the_run_is_handed_back_though_its_slot_was_missed(
    store: SQLiteLeaseBackend,
) -> None:
    """The loop forgets its progress after a failed step and plans again from the store, where
    the unknown lease is the job's latest record; a later slot may be all that is due then."""
    a = decider(lost := AnswerLost(store))
    loop = Loop(a, interval=1, sweep_every=60)
    lost.armed = True
    assert not loop.step(lambda won: True, force=True).healthy
    sent: list[Won] = []
    assert loop.step(lambda won: sent.append(won) is None, force=True).healthy
    assert [w.run.id for w in sent] == ["job@2026-12-01T12:00:00Z"]


def test_a_run_another_instance_leased_is_left_to_it(store: SQLiteLeaseBackend) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = False
    with pytest.raises(BackendUnavailable):
        a.tick()  # not done: b wins the run
    (won,) = decider(store, owner="b").tick()
    assert a.sweep() == []
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
    assert a.sweep() == []
    record = store.runs("job")[0]
    assert (record.state, record.token) == (RunState.RUNNING, leased.token)


def test_a_run_answered_since_is_forgotten(store: SQLiteLeaseBackend) -> None:
    a = decider(lost := AnswerLost(store))
    lost.armed = False
    with pytest.raises(BackendUnavailable):
        a.tick()  # not done
    (won,) = a.tick()  # answered: won, so a knows it holds it
    assert a._unanswered == set()
    assert a.sweep() == []
    assert store.runs("job")[0].token == won.run.token


def test_a_cluster_node_that_failed_in_a_call_not_acknowledged_is_read_again(
    store: SQLiteLeaseBackend,
) -> None:
    """On Redis Cluster a node that failed makes the call raise NotAcknowledged with only the
    other nodes' wins in it (handed back at once): the failed node may have done its part."""
    a = decider(lost := AnswerLost(store))
    lost.armed, lost.error = True, NotAcknowledged("a node failed", [])
    with pytest.raises(NotAcknowledged):
        a.tick()
    (won,) = a.sweep()
    assert won.run.attempt == 1


def test_a_sweep_reads_a_bounded_number_of_jobs(
    store: SQLiteLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deciding, "UNANSWERED_JOBS_PER_SWEEP", 2)
    lost = AnswerLost(store)
    a = Decider(lost, owner="a", lease=30, clock=lambda: NOW)
    for name in ("j1", "j2", "j3"):
        a.add(Job(name=name, schedule=make_schedule(cron=None, every=60, tz=None), handler=print))
    lost.armed = True
    with pytest.raises(BackendUnavailable):
        a.tick()
    assert sorted(w.run.job for w in a.sweep()) == ["j1", "j2"]
    assert [w.run.job for w in a.sweep()] == ["j3"]


class StartLost:
    """A lease backend whose first ``start`` is done (``done=True``) or not, then raises
    ``BackendUnavailable`` as if its answer never came."""

    def __init__(self, backend: SQLiteLeaseBackend, done: bool) -> None:
        self.backend, self.done, self.lost = backend, done, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        if self.lost:
            return self.backend.start(run_id, token, owner, lease)
        self.lost = True
        if self.done:
            self.backend.start(run_id, token, owner, lease)
        raise BackendUnavailable("the connection closed first")


@pytest.mark.parametrize(("done", "attempt"), [(True, 2), (False, 1)])
def test_a_start_unanswered_is_handed_back_at_the_next_sweep_and_run(
    store: SQLiteLeaseBackend, done: bool, attempt: int
) -> None:
    """The standalone scheduler: the handler is not called for a start it cannot confirm; the
    next step's sweep hands the run back and leases it again (an attempt more if the start was
    recorded), rather than waiting for the lease to run out."""
    scheduler = relay.Scheduler(
        StartLost(store, done), lease=30, heartbeat=10, clock=lambda: NOW, stop_timeout=1
    )
    attempts: list[int] = []
    scheduler.job(every=60, name="job")(lambda run: attempts.append(run.attempt))
    scheduler.run_pending()
    assert scheduler.join(10) and attempts == []
    scheduler.run_pending()
    assert scheduler.join(10) and attempts == [attempt]
    assert store.runs("job")[0].state is RunState.SUCCEEDED
    scheduler.shutdown()
