"""The deciding half, driven by an injected clock shared by the instance and the SQLite store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import BackendUnavailable, RunState
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.backends.sqlite_claim import SQLiteClaimBackend
from relay.engine import Decider
from relay.jobs import make_job
from relay.testing import FakeClock
from tests.fixtures import T0, decider

UTC = timezone.utc


class Counting:
    """Wraps a backend and counts calls to it, to prove a tick asks the store nothing."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.capability = inner.capability

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if callable(attribute):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return attribute(*args, **kwargs)

            return counted
        return attribute


def slots(won: list[Any]) -> list[str]:
    return [w.run.id.split("@")[1] for w in won]


def test_a_tick_with_nothing_due_asks_the_store_nothing(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    counting = Counting(clocked_store)
    d = decider(counting, fake_clock)
    assert slots(d.tick()) == ["2026-11-29T12:00:00Z"]
    calls = counting.calls
    for _ in range(50):
        fake_clock.advance(1)
        if fake_clock() < T0 + 60:
            assert d.tick() == []
    assert counting.calls == calls


def test_an_instance_joining_late_reads_the_record_once_not_every_tick(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    assert slots(decider(clocked_store, fake_clock, "a").tick()) == ["2026-11-29T12:00:00Z"]
    fake_clock.advance(5)
    counting = Counting(clocked_store)
    late = decider(counting, fake_clock, "b")
    assert late.tick() == []  # the latest slot is recorded already: nothing new for "b"
    assert counting.calls == 1  # it read the job's last slot ...
    for _ in range(50):
        fake_clock.advance(1)
        assert late.tick() == []
    assert counting.calls == 1  # ... once: no store call until the next slot is due
    fake_clock.advance(10)
    assert slots(late.tick()) == ["2026-11-29T12:01:00Z"]


def test_instances_ticking_at_different_moments_race_for_the_same_run(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    first, second = decider(clocked_store, fake_clock, "a"), decider(clocked_store, fake_clock, "b")
    fake_clock.advance(0.2)
    assert slots(first.tick()) == ["2026-11-29T12:00:00Z"]
    fake_clock.advance(0.7)
    assert second.tick() == []  # same slot, already held by "a"


def test_catch_up_runs_missed_slots_within_the_window(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    before = decider(clocked_store, fake_clock, catch_up=600)
    won = before.tick()
    clocked_store.finish(won[0].run.id, won[0].run.token, succeeded=True)
    fake_clock.advance(30 * 60 + 5)  # every instance was down for half an hour
    after = decider(clocked_store, fake_clock, "b", catch_up=600)
    # 12:20:00 is 605 s old at 12:30:05: just outside the 600 s window.
    assert slots(after.tick()) == [f"2026-11-29T12:{m}:00Z" for m in range(21, 31)]
    missed = [r for r in clocked_store.runs("job", limit=100) if r.reason == "missed"]
    assert len(missed) == 20  # 12:01 … 12:20


def test_without_catch_up_only_the_latest_slot_runs(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    decider(clocked_store, fake_clock).tick()
    fake_clock.advance(10 * 60 + 1)
    assert slots(decider(clocked_store, fake_clock, "b").tick()) == ["2026-11-29T12:10:00Z"]
    states = {r.id.split("@")[1]: (r.state, r.reason) for r in clocked_store.runs("job", limit=100)}
    assert states["2026-11-29T12:05:00Z"] == (RunState.SKIPPED, "missed")


def test_a_new_job_has_nothing_to_catch_up(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    fake_clock.advance(0.5)
    assert slots(decider(clocked_store, fake_clock, every=1, catch_up=3600).tick()) == [
        "2026-11-29T12:00:00Z"
    ]


def test_a_new_job_does_not_run_a_long_past_slot(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    fake_clock.advance(3 * 3600 + 600)  # a daily job created long after its slot
    d = Decider(clocked_store, owner="a", lease=30, clock=fake_clock)
    d.add(make_job(clocked_store, name="daily", cron="0 12 * * *"))
    assert d.tick() == []
    assert clocked_store.runs("daily") == []


def test_stale_runs_are_skipped_by_the_store(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    decider(clocked_store, fake_clock).tick()
    fake_clock.advance(5 * 60 + 30)
    d = decider(clocked_store, fake_clock, "b", catch_up=3600, stale_after=60)
    assert slots(d.tick()) == ["2026-11-29T12:05:00Z"]
    reasons = {r.id.split("@")[1]: r.reason for r in clocked_store.runs("job", limit=100)}
    assert reasons["2026-11-29T12:02:00Z"] == "stale"


def test_sweep_takes_over_a_dead_runners_run(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    (won,) = decider(clocked_store, fake_clock, "dead").tick()
    backup = decider(clocked_store, fake_clock, "backup")
    assert backup.sweep() == []
    fake_clock.advance(31)
    (taken,) = backup.sweep()
    assert taken.run.id == won.run.id and taken.run.attempt == 2 and taken.run.token > won.run.token


def test_sweep_leaves_other_apps_jobs_alone(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    decider(clocked_store, fake_clock, "other-app").tick()
    fake_clock.advance(31)
    stranger = Decider(clocked_store, owner="x", lease=30, clock=fake_clock)
    stranger.add(make_job(clocked_store, name="unrelated", every=60))
    assert stranger.sweep() == []


def test_claim_backend_claims_only_the_latest_recent_slot(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    claims = SQLiteClaimBackend(tmp_path / "c.db")
    d = Decider(claims, owner="a", lease=0, clock=fake_clock)
    d.add(make_job(claims, name="job", every=60))
    assert slots(d.tick()) == ["2026-11-29T12:00:00Z"]
    fake_clock.advance(5 * 60 + 1)
    assert slots(d.tick()) == ["2026-11-29T12:05:00Z"]
    assert Decider(claims, owner="b", lease=0, clock=fake_clock).tick() == []


# -- the standalone scheduler on top ----------------------------------------------------------


def scheduler(store: Any, clock: FakeClock, owner: str) -> relay.Scheduler:  # type: ignore[type-arg]
    return relay.Scheduler(
        store, lease=30, heartbeat=10, owner=owner, clock=clock, stop_timeout=0.5
    )


def test_failed_runs_are_retried_until_max_attempts(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    attempts: list[tuple[int, int]] = []
    s = scheduler(clocked_store, fake_clock, "a")

    @s.job(every=60, max_attempts=3, name="flaky")
    def flaky(run: relay.Run) -> None:
        attempts.append((run.attempt, run.token))
        raise RuntimeError("boom")

    for _ in range(4):
        s.run_pending()
        assert s.join(10)  # let the run finish before the next tick
    assert [a for a, _ in attempts] == [1, 2, 3]
    assert [t for _, t in attempts] == sorted({t for _, t in attempts})
    (record,) = clocked_store.runs("flaky")
    assert (record.state, record.failures) == (RunState.FAILED, 3)


def test_graceful_stop_hands_running_runs_over(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    release = threading.Event()
    s = scheduler(clocked_store, fake_clock, "leaving")

    @s.job(every=60, name="long")
    def long(run: relay.Run) -> None:
        release.wait(10)

    (run,) = s.run_pending()
    s.shutdown()  # the handler is still running: its lease is handed over
    release.set()
    (record,) = clocked_store.runs("long")
    assert (record.state, record.reason) == (RunState.PENDING, "released")
    other = scheduler(clocked_store, fake_clock, "staying")
    other.job(every=60, name="long")(lambda r: None)
    (taken,) = other.decider.sweep()
    assert taken.run.attempt == 2 and taken.run.token > run.token


def test_overlap_skip_while_the_previous_run_is_live(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    release = threading.Event()
    # The lease outlasts the minute the clock jumps: the first run is still live at 12:01.
    s = relay.Scheduler(
        clocked_store, lease=300, heartbeat=10, owner="a", clock=fake_clock, stop_timeout=0.5
    )

    @s.job(every=60, overlap="skip", name="slow")
    def slow(run: relay.Run) -> None:
        release.wait(10)

    assert len(s.run_pending()) == 1
    fake_clock.advance(60)
    assert s.run_pending() == []
    release.set()
    s.shutdown()
    reasons = [r.reason for r in clocked_store.runs("slow")]
    assert reasons[0] == "overlap"


class Flaky:
    """A backend that is down until told otherwise."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.down, self.capability = inner, True, inner.capability

    def __getattr__(self, name: str) -> Any:
        if self.down and name in {"acquire_many", "last_slots", "reclaimable", "skip", "skip_many"}:
            raise BackendUnavailable("store is down (test)")
        return getattr(self.inner, name)


def test_scheduler_survives_an_unreachable_store_and_runs_nothing_it_did_not_win(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    flaky = Flaky(clocked_store)
    ran: list[str] = []
    s = relay.Scheduler(flaky, lease=30, heartbeat=10, clock=fake_clock, tick=0.01, stop_timeout=1)  # type: ignore[call-overload]
    s.job(every=60, name="job")(lambda run: ran.append(run.id))
    loop = threading.Thread(target=s._loop)
    loop.start()
    try:
        threading.Event().wait(0.3)
        assert ran == [] and loop.is_alive()
        flaky.down = False
        for _ in range(200):
            if ran:
                break
            threading.Event().wait(0.05)
    finally:
        s.stop()
        loop.join(5)
        s.shutdown()
    assert ran == ["job@2026-11-29T12:00:00Z"]


def test_run_closes_only_a_backend_it_opened(
    tmp_path: Path, clocked_store: SQLiteLeaseBackend
) -> None:
    opened = relay.Scheduler(f"sqlite:///{tmp_path / 'own.db'}", tick=0.01)
    threading.Timer(0.2, opened.stop).start()
    opened.run()
    with pytest.raises(BackendUnavailable):
        opened.backend.runs()
    given = relay.Scheduler(clocked_store, tick=0.01)
    threading.Timer(0.2, given.stop).start()
    given.run()
    assert clocked_store.runs() == []  # still open: the caller owns it


class CountingSchedule:
    """A job's schedule that counts how often the decider computes it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def latest_slot(self, at: datetime) -> datetime | None:
        self.calls += 1
        return self.inner.latest_slot(at)  # type: ignore[no-any-return]

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        self.calls += 1
        return self.inner.slots_between(after, until)  # type: ignore[no-any-return]

    def describe(self) -> str:
        return str(self.inner.describe())


def test_an_idle_tick_computes_no_schedule_whatever_the_number_of_jobs(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    import dataclasses

    d = Decider(clocked_store, owner="a", lease=30, clock=fake_clock)
    schedules = []
    for i in range(200):
        job = make_job(clocked_store, name=f"job{i}", every=60 if i == 0 else 3600)
        schedules.append(CountingSchedule(job.schedule))
        d.add(dataclasses.replace(job, schedule=schedules[-1]))
    assert slots(d.tick()) == ["2026-11-29T12:00:00Z", *["2026-11-29T12:00:00Z"] * 199]
    assert d.next_due() == datetime(2026, 11, 29, 12, 1, tzinfo=UTC)
    before = [s.calls for s in schedules]
    for _ in range(59):
        fake_clock.advance(1)
        assert d.tick() == []
    assert [s.calls for s in schedules] == before  # no job was looked at
    fake_clock.advance(1)
    assert slots(d.tick()) == ["2026-11-29T12:01:00Z"]
    assert [s.calls for s in schedules][1:] == before[1:]  # only the job that was due
    assert d.next_due() == datetime(2026, 11, 29, 12, 2, tzinfo=UTC)


class LatestCounting(CountingSchedule):
    """Counts only how often the latest slot is asked for."""

    def latest_slot(self, at: datetime) -> datetime | None:
        self.calls += 1
        return self.inner.latest_slot(at)  # type: ignore[no-any-return]

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        return self.inner.slots_between(after, until)  # type: ignore[no-any-return]


def test_jobs_sharing_a_schedule_compute_it_once_a_tick_and_keep_their_own_jitter(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    import dataclasses

    from relay.jobs import jitter_delay

    d = Decider(clocked_store, owner="a", lease=30, clock=fake_clock)
    shared = LatestCounting(make_job(clocked_store, name="x", every=60).schedule)
    plain = make_job(clocked_store, name="plain", every=60)
    # The jittered job first: the next slot it waits for must not become the others'.
    d.add(dataclasses.replace(plain, name="jittered", schedule=shared, jitter=50.0))
    for name in ("plain", "other"):
        d.add(dataclasses.replace(plain, name=name, schedule=shared))
    fake_clock.advance(50)  # every delay (< 50 s) of the 12:00 slot has passed: all decide 12:00
    assert sorted(w.run.id for w in d.tick()) == [
        "jittered@2026-11-29T12:00:00Z",
        "other@2026-11-29T12:00:00Z",
        "plain@2026-11-29T12:00:00Z",
    ]
    assert shared.calls == 1  # once for the tick, not once a job
    fake_clock.advance(10)
    assert sorted(w.run.id for w in d.tick()) == [
        "other@2026-11-29T12:01:00Z",
        "plain@2026-11-29T12:01:00Z",
    ]
    delay = jitter_delay("jittered", datetime(2026, 11, 29, 12, 1, tzinfo=UTC), 50.0)
    assert delay > 0
    fake_clock.advance(delay + 0.01)
    assert [w.run.id for w in d.tick()] == ["jittered@2026-11-29T12:01:00Z"]


def test_jobs_due_in_a_tick_the_store_refused_are_decided_at_the_next(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    d = decider(clocked_store, fake_clock)
    assert slots(d.tick()) == ["2026-11-29T12:00:00Z"]
    fake_clock.advance(60)
    real = clocked_store.acquire_many

    def down(requests: Any) -> Any:
        raise BackendUnavailable("down for a moment")

    clocked_store.acquire_many = down  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        d.tick()
    clocked_store.acquire_many = real  # type: ignore[method-assign]
    fake_clock.advance(1)
    assert slots(d.tick()) == ["2026-11-29T12:01:00Z"]
