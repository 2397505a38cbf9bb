"""The Dramatiq scheduler's ticks on the fake clock, the actors run by Dramatiq's own ``Worker``
on its ``StubBroker``: after each step the test waits with the broker's and the worker's
``join``, Dramatiq's own way of letting a stub broker's messages finish."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

import relay_dramatiq
from relay.runs import RunState
from relay.testing import FakeClock, runs_of
from relay_dramatiq import RelayMiddleware, Scheduler, periodic

UTC = timezone.utc
SLOT = datetime(2026, 1, 1, 0, 20, tzinfo=UTC)


@pytest.fixture
def broker(relay_store: str) -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(relay_store))
    broker.emit_after("process_boot")
    yield broker
    broker.close()


def test_the_scheduler_follows_the_fake_clock_and_the_worker_runs_and_retries(
    broker: StubBroker, relay_clock: FakeClock
) -> None:
    attempts: list[tuple[datetime, int, datetime]] = []

    @periodic(cron="*/10 * * * *")
    @dramatiq.actor(broker=broker, actor_name="cleanup")
    def cleanup() -> None:
        run = relay_dramatiq.current_run()
        assert run is not None
        attempts.append((run.scheduled_for, run.attempt, relay_clock.now()))
        if run.scheduled_for == SLOT and run.attempt < 3:
            raise RuntimeError("the disk is full")

    worker = dramatiq.Worker(broker, worker_timeout=50, worker_threads=1)
    worker.start()

    def settle() -> None:
        broker.join(cleanup.queue_name, fail_fast=False)
        worker.join()

    try:
        scheduler = Scheduler([p for p in relay_dramatiq.periodic_actors() if p.actor is cleanup])
        relay_clock.drive(scheduler.step, settle=settle)
        relay_clock.advance(minutes=30)
    finally:
        worker.stop()
    slots = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=10 * k) for k in range(4)]
    records = runs_of("cleanup")
    assert [r.scheduled_for for r in records] == slots
    assert all(r.state is RunState.SUCCEEDED for r in records)
    assert [r.attempt for r in records] == [1, 1, 3, 1]
    # Retried at the scheduler's sweeps, a heartbeat (10 s) apart.
    assert [(a, at) for slot, a, at in attempts if slot == SLOT] == [
        (1, SLOT), (2, SLOT + timedelta(seconds=10)), (3, SLOT + timedelta(seconds=20))
    ]  # fmt: skip
