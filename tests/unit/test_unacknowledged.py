"""The engine's one decision for steps a store's replicas did not confirm, on a real SQLite store.

A wrapper makes the store answer ``NotAcknowledged`` after doing the step, as a Redis primary does
when ``WAIT`` finds too few replicas (the Redis tests do it for real with a frozen replica).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from relay.backends.sqlite import SQLiteLeaseBackend
from relay.contract import AcquireRequest, AcquireResult
from relay.engine import Decider, Runner
from relay.errors import BackendUnavailable, NotAcknowledged
from relay.jobs import Job
from relay.runs import Run, RunState
from relay.schedules import make_schedule

UTC = timezone.utc
NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC).timestamp()


class Unconfirmed:
    """A lease backend whose named steps are done, then answered ``NotAcknowledged``."""

    def __init__(self, backend: SQLiteLeaseBackend, steps: set[str]) -> None:
        self.backend = backend
        self.steps = steps
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        self.calls.append("acquire_many")
        results = self.backend.acquire_many(requests)
        if "acquire" in self.steps:
            won = [r.run for r in results if r.run is not None]
            raise NotAcknowledged("acquire not confirmed", won)
        return results

    def skip_many(self, runs: Sequence[tuple[str, datetime]], reason: str) -> list[bool]:
        self.calls.append("skip_many")
        if "skip" in self.steps:
            raise BackendUnavailable("skip not answered")
        return self.backend.skip_many(runs, reason)

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        started = self.backend.start(run_id, token, owner, lease)
        if "start" in self.steps:
            raise NotAcknowledged("start not confirmed")
        return started


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend.from_url(f"sqlite:///{tmp_path / 'relay.db'}")
    yield backend
    backend.close()


def decider(backend: Any, catch_up: float = 0.0) -> Decider:
    made = Decider(backend, owner="a", lease=30, clock=lambda: NOW)
    schedule = make_schedule(cron=None, every=60, tz=None)
    made.add(Job(name="job", schedule=schedule, handler=print, catch_up=catch_up))
    return made


def test_a_won_run_not_confirmed_is_handed_back_and_leased_again_as_attempt_1(
    store: SQLiteLeaseBackend,
) -> None:
    with pytest.raises(NotAcknowledged):
        decider(Unconfirmed(store, {"acquire"})).tick()
    (record,) = store.runs("job")
    assert (record.state, record.attempt, record.reason) == (RunState.PENDING, 0, "released")
    (won,) = decider(store).sweep()
    assert (won.run.attempt, won.run.token > record.token) == (1, True)


def test_a_start_not_confirmed_is_handed_back_and_not_run(store: SQLiteLeaseBackend) -> None:
    (won,) = decider(store).tick()
    runner = Runner(Unconfirmed(store, {"start"}), owner="a", lease=30, heartbeat=10)
    called = []
    with pytest.raises(NotAcknowledged):
        runner.execute(won.run, called.append)
    assert called == []
    (record,) = store.runs("job")
    assert (record.state, record.failures) == (RunState.PENDING, 0)


def test_missed_slots_are_recorded_before_any_run_is_won(store: SQLiteLeaseBackend) -> None:
    # A failure to record them must not leave a run won but never dispatched.
    store.skip("job", datetime(2026, 12, 1, 11, 50, tzinfo=UTC), "missed")
    wrapped = Unconfirmed(store, {"skip"})
    with pytest.raises(BackendUnavailable):
        decider(wrapped, catch_up=120).tick()
    assert wrapped.calls == ["skip_many"]
    assert [r.state for r in store.runs("job")] == [RunState.SKIPPED]
