"""Each event fires exactly once, from the engine, in the scenario that causes it (one clock)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest

from relay import Run, RunState
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.backends.sqlite_claim import SQLiteClaimBackend
from relay.engine import Decider, Runner
from relay.events import (
    Event,
    EventBus,
    FencedOff,
    RunAbandoned,
    RunExhausted,
    RunFailed,
    RunHandedOver,
    RunLost,
    RunPickedUp,
    RunRetried,
    RunSkipped,
    RunsMissed,
    RunStarted,
    RunSucceeded,
    RunTakenOver,
    RunWon,
)
from relay.fencing import SQLFence
from relay.jobs import make_job
from relay.testing import FakeClock

UTC = timezone.utc
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC).timestamp()
E = TypeVar("E", bound=Event)


class Clock(FakeClock):
    """The test kit's fake clock from T0, moved by hand (nothing is driven)."""

    def __init__(self) -> None:
        super().__init__(T0)


class Seen:
    """Every event of one bus, with helpers to pick one kind out."""

    def __init__(self) -> None:
        self.bus = EventBus(log=False)
        self.events: list[Event] = []
        self.bus.on(Event, self.events.append)

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def one(self, kind: type[E]) -> E:
        found = self.of(kind)
        assert len(found) == 1, f"{kind.__name__}: {found} in {self.events}"
        return found[0]

    def types(self) -> list[str]:
        return [e.type for e in self.events]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=clock)
    yield backend
    backend.close()


@pytest.fixture
def seen() -> Seen:
    return Seen()


def decider(
    store: Any, clock: Clock, seen: Seen, owner: str, lease: float = 30, **job: Any
) -> Decider:
    made = Decider(store, owner=owner, lease=lease, clock=clock, events=seen.bus)
    made.add(make_job(store, name="job", **{"every": 60, **job}))
    return made


def runner(store: Any, clock: Clock, seen: Seen, owner: str) -> Runner:
    return Runner(store, owner=owner, lease=30, heartbeat=10, events=seen.bus, clock=clock)


def test_one_instance_wins_and_the_other_loses(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    first, second = decider(store, clock, seen, "a"), decider(store, clock, seen, "b")
    first.tick()
    second.tick()  # learns the job's history: 12:00 is recorded, nothing to decide
    clock.advance(60)
    [won] = first.tick()
    second.tick()
    assert seen.types() == ["won", "won", "lost"]
    event = seen.of(RunWon)[1]
    assert (event.run_id, event.attempt, event.token, event.owner) == (
        "job@2026-11-29T12:01:00Z", 1, won.run.token, "a",
    )  # fmt: skip
    lost = seen.one(RunLost)
    assert (lost.run_id, lost.owner) == ("job@2026-11-29T12:01:00Z", "b")


def test_a_claim_backend_reports_won_and_lost(tmp_path: Path, clock: Clock, seen: Seen) -> None:
    claims = SQLiteClaimBackend(tmp_path / "claims.db")
    try:
        decider(claims, clock, seen, "a").tick()
        decider(claims, clock, seen, "b").tick()  # a claim backend keeps no history to read
    finally:
        claims.close()
    assert seen.types() == ["won", "lost"]


def test_an_overlapping_run_is_reported_skipped(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    d = decider(store, clock, seen, "a", lease=300, overlap="skip")
    d.tick()
    clock.advance(60)
    assert d.tick() == []
    skipped = seen.one(RunSkipped)
    assert (skipped.run_id, skipped.reason) == ("job@2026-11-29T12:01:00Z", "overlap")


def test_a_stale_run_is_reported_skipped(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, Seen(), "a").tick()
    store.finish(won.run.id, won.run.token, succeeded=True)
    clock.advance(3 * 60 + 30)  # 12:01 and 12:02 are over 60 s old; 12:03 is 30 s old
    decider(store, clock, seen, "b", catch_up=3600, stale_after=60).tick()
    assert [(e.run_id[-9:], e.reason) for e in seen.of(RunSkipped)] == [
        ("12:01:00Z", "stale"), ("12:02:00Z", "stale"),
    ]  # fmt: skip
    assert seen.one(RunWon).run_id == "job@2026-11-29T12:03:00Z"


def test_slots_missed_during_downtime_are_reported_once_per_job(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, Seen(), "a").tick()
    store.finish(won.run.id, won.run.token, succeeded=True)
    clock.advance(10 * 60 + 1)  # every instance was down for ten minutes
    decider(store, clock, seen, "b").tick()
    decider(store, clock, seen, "c").tick()  # finds them recorded already: reports nothing
    missed = seen.one(RunsMissed)
    assert (missed.job, missed.count, missed.owner) == ("job", 9, "b")
    assert (missed.first, missed.last) == (
        datetime(2026, 11, 29, 12, 1, tzinfo=UTC), datetime(2026, 11, 29, 12, 9, tzinfo=UTC),
    )  # fmt: skip


def test_a_dead_runners_run_is_reported_taken_over_by_the_sweep(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, Seen(), "dead").tick()
    # A runner that dies: its heartbeat thread never beats again.
    Runner(store, owner="dead:worker", lease=30, heartbeat=3600, clock=clock).begin(won.run)
    clock.advance(31)
    decider(store, clock, seen, "backup").sweep()
    event = seen.one(RunTakenOver)
    assert (event.previous_owner, event.previous_attempt, event.attempt, event.max_attempts) == (
        "dead:worker", 1, 2, 3,
    )  # fmt: skip
    assert event.owner == "backup" and event.token > won.run.token
    assert seen.types() == ["taken_over"]


def test_a_failed_attempt_then_its_retry_then_the_final_failure(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    d = decider(store, clock, seen, "a", max_attempts=2)
    r = runner(store, clock, seen, "a")

    def boom(run: Run) -> None:
        raise RuntimeError("boom")

    [first] = d.tick()
    clock.advance(2)
    assert r.execute(first.run, boom, max_attempts=2) is RunState.PENDING
    [second] = d.sweep()
    assert r.execute(second.run, boom, max_attempts=2) is RunState.FAILED
    assert seen.types() == ["won", "started", "failed", "retried", "started", "failed"]
    attempt1, attempt2 = seen.of(RunFailed)
    assert (attempt1.attempt, attempt1.max_attempts, attempt1.final) == (1, 2, False)
    assert (attempt2.attempt, attempt2.final, attempt2.error) == (2, True, "RuntimeError: boom")
    assert isinstance(attempt1.exception, RuntimeError)
    assert (seen.one(RunRetried).attempt, seen.one(RunRetried).max_attempts) == (2, 2)
    assert seen.of(RunStarted)[0].start_delay == pytest.approx(2)


def test_a_run_whose_last_attempt_died_is_reported_exhausted(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    decider(store, clock, Seen(), "dead", max_attempts=1).tick()
    clock.advance(31)
    decider(store, clock, seen, "backup", max_attempts=1).sweep()
    exhausted = seen.one(RunExhausted)
    assert (exhausted.max_attempts, exhausted.attempt) == (1, 1)
    assert seen.types() == ["exhausted"]


def test_a_handed_over_run_is_reported_handed_over_then_picked_up(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, seen, "leaving").tick()
    active = runner(store, clock, seen, "leaving").begin(won.run)
    assert active is not None
    active.release()
    decider(store, clock, seen, "staying").sweep()
    assert seen.types() == ["won", "started", "handed_over", "picked_up"]
    picked = seen.one(RunPickedUp)
    assert (picked.previous_owner, picked.previous_attempt, picked.attempt) == ("leaving", 1, 2)


def test_a_handed_over_run_after_a_failure_is_picked_up_not_retried(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    d = decider(store, clock, seen, "a")
    [first] = d.tick()
    runner(store, clock, seen, "a").execute(first.run, lambda run: 1 / 0)
    [second] = d.sweep()
    active = runner(store, clock, seen, "a").begin(second.run)
    assert active is not None
    active.release()
    d.sweep()
    assert seen.types()[-3:] == ["started", "handed_over", "picked_up"]
    assert seen.one(RunRetried).attempt == 2


def test_a_run_reports_started_and_succeeded_with_its_durations(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, seen, "a").tick()
    clock.advance(1.5)
    r = runner(store, clock, seen, "a:w")
    assert r.execute(won.run, lambda run: None, max_attempts=3) is RunState.SUCCEEDED
    started, succeeded = seen.one(RunStarted), seen.one(RunSucceeded)
    assert started.start_delay == pytest.approx(1.5) and started.owner == "a:w"
    assert 0 <= succeeded.duration < 5 and succeeded.token == won.run.token


def test_a_stale_delivery_is_reported_fenced_off_at_start(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, seen, "a").tick()
    r = runner(store, clock, seen, "a:w")
    assert r.execute(won.run, lambda run: None) is RunState.SUCCEEDED
    assert r.begin(won.run) is None  # the same message delivered again
    fenced = seen.one(FencedOff)
    assert (fenced.operation, fenced.token) == ("start", won.run.token)


def test_a_stale_runner_is_fenced_off_once_at_its_finish(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, seen, "a").tick()
    r = Runner(store, owner="frozen", lease=30, heartbeat=3600, events=seen.bus, clock=clock)
    active = r.begin(won.run)
    assert active is not None
    clock.advance(31)  # frozen past its lease: another instance takes the run over
    decider(store, clock, seen, "b").sweep()
    assert active.succeed() is None
    assert seen.types() == ["won", "started", "taken_over", "fenced_off"]
    assert seen.one(FencedOff).operation == "finish"


def test_a_heartbeat_refused_is_reported_once_and_the_finish_not_tried(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, seen, "a").tick()
    r = Runner(store, owner="slow", lease=30, heartbeat=0.05, events=seen.bus, clock=clock)
    active = r.begin(won.run)
    assert active is not None
    clock.advance(31)
    decider(store, clock, seen, "b").sweep()
    for _ in range(100):
        if active.lost:
            break
        threading.Event().wait(0.02)
    assert active.fail("too late") is None
    assert seen.one(FencedOff).operation == "heartbeat"
    assert seen.of(RunFailed) == []


def test_a_refused_fenced_write_is_reported_and_the_run_goes_on(
    tmp_path: Path, store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    fence = SQLFence.sqlite(tmp_path / "fenced.db")
    [won] = decider(store, clock, seen, "a").tick()
    fence.write("report", won.run.token + 1, "newer")  # a later token of the job wrote it

    def handler(run: Run) -> None:
        assert fence.write("report", run.token, "mine") is False

    assert runner(store, clock, seen, "a").execute(won.run, handler) is RunState.SUCCEEDED
    fenced = seen.one(FencedOff)
    assert (fenced.operation, fenced.token) == ("write", won.run.token)
    assert "report" in fenced.detail
    assert seen.types()[-1] == "succeeded"


def test_a_handover_the_store_refuses_is_reported_fenced_off(
    store: SQLiteLeaseBackend, clock: Clock, seen: Seen
) -> None:
    [won] = decider(store, clock, seen, "a").tick()
    store.finish(won.run.id, won.run.token, succeeded=False, error="x")
    runner(store, clock, seen, "a").release(won.run)
    assert seen.one(FencedOff).operation == "release"
    assert seen.of(RunHandedOver) == []


def test_a_result_the_store_cannot_record_while_stopping_is_reported_abandoned_then_taken_over(
    tmp_path: Path, clock: Clock, seen: Seen
) -> None:
    path = tmp_path / "relay.db"
    store = SQLiteLeaseBackend(path, clock=clock, busy_timeout=0.05)
    [won] = decider(store, clock, seen, "a").tick()
    stopping = runner(store, clock, seen, "a:w")
    active = stopping.begin(won.run)
    assert active is not None
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # the store answers no write: "database is locked"
        stopping.stop_finishing(0.5)  # the host stops: a finish is retried 0.5 s at most
        assert active.succeed() is None
        runner(store, clock, seen, "a:w").release(won.run)
        other.execute("ROLLBACK")
    finish, release = seen.of(RunAbandoned)
    assert (finish.operation, finish.outcome) == ("finish", "succeeded")
    assert finish.token == won.run.token
    assert (release.operation, release.outcome) == ("release", "")
    assert "locked" in finish.error and finish.lease == 30
    assert "runs it again" in finish.message() and "run.token" in finish.message()
    assert seen.of(RunSucceeded) == [] and seen.of(RunHandedOver) == []
    # Nothing was recorded: once the lease runs out, another instance takes the run over.
    clock.advance(31)
    decider(store, clock, seen, "b").sweep()
    assert seen.types()[-1] == "taken_over"
    store.close()


def test_events_are_emitted_from_the_engine_only() -> None:
    """No host constructs an event: they import none of the event classes."""
    root = Path(__file__).resolve().parents[2]
    hosts = [root / "shared/relay/scheduler.py", *root.glob("relay_celery/*.py")]
    hosts += root.glob("relay_dramatiq/*.py")
    kinds = [name for name in dir(__import__("relay.events").events) if name.startswith("Run")]
    kinds += ["FencedOff", "StoreUnavailable", "StoreRecovered"]
    for path in hosts:
        text = path.read_text()
        for kind in kinds:
            assert f"{kind}(" not in text, f"{path.name} builds a {kind} itself"
