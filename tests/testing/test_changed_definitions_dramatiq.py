"""Dramatiq periodic actors changed in a rolling deploy fire on one definition (issue 39, item 7).

Two ``relay-dramatiq`` schedulers on one store, in fake time, each with its own broker (its own
process in a deploy): the old one has ``cleanup`` every 60 s, the new one (started later) every
30 s. From the new one's start on, every slot is the new cadence's and the new scheduler's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

import relay_dramatiq
from relay.events import DefinitionDeferred
from relay.testing import FakeClock, runs_of
from relay_dramatiq import RelayMiddleware, Scheduler, periodic

UTC = timezone.utc
START = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def relay_clock_start() -> datetime:
    return START


def host(
    store: str, every: float
) -> tuple[StubBroker, Scheduler, RelayMiddleware[Any], list[DefinitionDeferred]]:
    """A broker with the middleware, ``cleanup`` every ``every`` seconds, and its scheduler."""
    broker = StubBroker()
    middleware: RelayMiddleware[Any] = RelayMiddleware(store)
    broker.add_middleware(middleware)
    broker.emit_after("process_boot")

    @periodic(every=every)
    @dramatiq.actor(broker=broker, actor_name="cleanup")
    def cleanup() -> None:
        pass

    deferred: list[DefinitionDeferred] = []
    middleware.on(DefinitionDeferred, deferred.append)
    mine = [p for p in relay_dramatiq.periodic_actors() if p.actor is cleanup]
    return broker, Scheduler(mine), middleware, deferred


@pytest.fixture
def brokers() -> Iterator[list[StubBroker]]:
    made: list[StubBroker] = []
    yield made
    for broker in made:
        broker.close()


def test_a_shorter_period_runs_only_the_new_cadence_from_the_new_schedulers_start(
    relay_store: str, relay_clock: FakeClock, brokers: list[StubBroker]
) -> None:
    old_broker, old, _, deferred = host(relay_store, 60)
    brokers.append(old_broker)
    relay_clock.drive(old.step)
    relay_clock.advance(minutes=2, seconds=5)
    started = relay_clock.now()
    new_broker, new, middleware, _ = host(relay_store, 30)
    brokers.append(new_broker)
    relay_clock.drive(new.step)
    relay_clock.advance(minutes=3)

    records = runs_of("cleanup")
    before = [r.scheduled_for for r in records if r.scheduled_for < started]
    after = [r for r in records if r.scheduled_for >= started]
    assert before == [START + timedelta(minutes=k) for k in range(3)]
    first = started + timedelta(seconds=25)
    assert [r.scheduled_for for r in after] == [first + timedelta(seconds=30 * k) for k in range(6)]
    assert {r.owner for r in after} == {middleware.owner}
    [event] = deferred  # the old scheduler said why it stopped firing cleanup
    assert (event.ours, event.deciding) == ("every 60s", "every 30s")
