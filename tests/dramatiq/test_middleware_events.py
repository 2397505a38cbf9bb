"""``RelayMiddleware.on``: the scheduler's and the worker's events reach hooks on the middleware."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

import relay_dramatiq
from relay.events import Event, RunFailed, RunStarted
from relay_dramatiq import Scheduler, periodic
from tests.dramatiq.test_middleware import broker, db, middleware_of, process

__all__ = ["broker", "db"]  # fixtures


def test_hooks_see_deciding_and_running_events_and_a_raising_hook_breaks_nothing(
    broker: StubBroker, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    @periodic(every=3600, catch_up=3600, max_attempts=2)
    @dramatiq.actor(broker=broker)
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first attempt fails")

    seen: list[Event] = []
    middleware = middleware_of(broker)
    middleware.on(Event, seen.append)

    def broken(event: Any) -> None:
        raise ValueError("a hook with a bug")

    middleware.on(RunStarted, broken)
    scheduler = Scheduler([p for p in relay_dramatiq.periodic_actors() if p.actor is flaky])
    with caplog.at_level(logging.ERROR, logger="relay.events"):
        for _ in range(2):
            assert scheduler.run_pending() is True
            process(broker)
            scheduler._groups[id(middleware)].loop.next_sweep = 0.0
    assert calls == [1, 1]
    assert [e.type for e in seen] == [
        "won", "dispatched", "started", "failed", "retried", "dispatched", "started", "succeeded",
    ]  # fmt: skip
    [failed] = [e for e in seen if isinstance(e, RunFailed)]
    assert (failed.attempt, failed.max_attempts, failed.final) == (1, 2, False)
    hook_errors = [r for r in caplog.records if r.name == "relay.events" and r.exc_info]
    assert len(hook_errors) == 2  # the raising hook, once per start: logged, never raised
