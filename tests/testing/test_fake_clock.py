"""The fake clock: it only goes forward, runs what falls due in order, and says how to use it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import relay
import relay.testing
from relay import clock as relay_clock_module
from relay.errors import ConfigurationError, RelayError
from relay.events import RunTakenOver
from relay.testing import FakeClock, SimulatedCrash, runs_of

UTC = timezone.utc


def test_it_starts_at_the_default_and_moves_by_what_it_is_told(relay_clock: FakeClock) -> None:
    assert relay_clock.now() == datetime(2026, 1, 1, tzinfo=UTC)
    relay_clock.advance(90, minutes=1, hours=1)
    relay_clock.advance(timedelta(days=1))
    assert relay_clock.now() == datetime(2026, 1, 2, 1, 2, 30, tzinfo=UTC)
    assert relay_clock_module.time() == relay_clock() == relay_clock.now().timestamp()
    relay.testing.advance(30)
    assert relay_clock.now().second == 0


@pytest.mark.parametrize(
    "move",
    [
        lambda c: c.advance(-1),
        lambda c: c.advance(timedelta(seconds=-5)),
        lambda c: c.advance(minutes=-1),
        lambda c: c.advance_to(datetime(2025, 12, 31, tzinfo=UTC)),
    ],
)
def test_it_never_goes_back(relay_clock: FakeClock, move: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"only goes forward.*relay_clock_start"):
        move(relay_clock)
    assert relay_clock.now() == datetime(2026, 1, 1, tzinfo=UTC)


def test_bad_times_name_the_fix(relay_clock: FakeClock) -> None:
    with pytest.raises(ConfigurationError, match="naive"):
        relay_clock.advance_to(datetime(2026, 2, 1))
    with pytest.raises(ConfigurationError, match="seconds as a number or a timedelta"):
        relay_clock.advance("1h")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"relay\.Scheduler or a function"):
        relay_clock.drive(42)
    with pytest.raises(ConfigurationError, match="already installed"):
        FakeClock().installed().__enter__()


def test_outside_a_test_with_the_fixtures_the_helpers_say_what_to_use() -> None:
    assert relay_clock_module.installed() is None
    with pytest.raises(RelayError, match="relay_clock fixture"):
        relay.testing.advance(60)
    with pytest.raises(RelayError, match="relay_store fixture"):
        runs_of("job")


def test_a_crashed_runner_is_taken_over_once_its_lease_runs_out(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any]
) -> None:
    taken: list[tuple[datetime, datetime]] = []
    relay_scheduler.on(RunTakenOver, lambda e: taken.append((e.slot, relay_clock.now())))
    attempts: list[tuple[int, int]] = []

    @relay_scheduler.job(every=3600, name="hourly")
    def hourly(run: relay.Run) -> None:
        attempts.append((run.attempt, run.token))
        if run.attempt == 1:
            raise SimulatedCrash

    relay_clock.advance(minutes=5)
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    # Lease 30 s, heartbeat 10 s: taken over at the first sweep after the lease ran out.
    assert taken == [(slot, slot + timedelta(seconds=40))]
    assert [a for a, _ in attempts] == [1, 2] and attempts[1][1] > attempts[0][1]
    [record] = runs_of("hourly")
    assert (record.state, record.attempt, record.failures) == ("succeeded", 2, 1)  # died: 1


def test_jobs_due_together_run_in_the_order_they_were_added(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any]
) -> None:
    ran: list[str] = []
    for name in ("b", "a", "c"):
        relay_scheduler.job(every=60, name=name)(lambda run: ran.append(run.job))
    relay_clock.advance(minutes=2)
    assert ran == ["b", "a", "c"] * 3


def test_a_handler_cannot_advance_the_clock_it_runs_on(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any]
) -> None:
    @relay_scheduler.job(every=60, max_attempts=1, name="sleepy")
    def sleepy(run: relay.Run) -> None:
        relay_clock.advance(30)

    relay_clock.advance(1)
    [record] = runs_of("sleepy")
    assert record.state == "failed"
    assert record.error is not None and "advance from the test instead" in record.error


def test_settle_names_the_runs_no_worker_finished(relay_clock: FakeClock, relay_store: str) -> None:
    store = relay.open_backend(relay_store)
    assert store.capability == "lease"
    relay.testing.settle(timeout=0.01)  # nothing leased yet
    won = store.acquire(relay.AcquireRequest("job", relay_clock.now(), "beat", 300)).run
    assert won is not None  # published by beat: its message waits for a worker
    with pytest.raises(ConfigurationError, match=r"job@2026-01-01T00:00:00Z.*consuming"):
        relay.testing.settle(timeout=0.05)
    store.start(won.id, won.token, "worker", 30)
    store.finish(won.id, won.token, succeeded=True)
    relay.testing.settle(timeout=0.05)
    store.close()


def test_async_handlers_are_awaited_in_fake_time(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any]
) -> None:
    done: list[tuple[datetime, int]] = []

    @relay_scheduler.job(every=60, name="async_job", max_attempts=2)
    async def async_job(run: relay.Run) -> None:
        import asyncio

        await asyncio.sleep(0)
        if run.attempt == 1 and not done:
            raise RuntimeError("first attempt fails")
        done.append((run.scheduled_for, run.attempt))

    relay_clock.advance(minutes=2)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert done == [(t0, 2), (t0 + timedelta(minutes=1), 1), (t0 + timedelta(minutes=2), 1)]
    assert [(r.state, r.attempt) for r in runs_of("async_job")] == [
        ("succeeded", 2), ("succeeded", 1), ("succeeded", 1),
    ]  # fmt: skip
