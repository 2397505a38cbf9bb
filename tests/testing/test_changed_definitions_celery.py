"""Celery beat entries changed in a rolling deploy fire on one definition (issue 39, item 7).

Two beats on one store, in fake time: the old one has ``report`` at 09:00, the new one (started
later, the entry changed to 10:00) decides, so the old beat publishes nothing of it. No worker is
needed: what each beat won is in the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

import relay_celery
from relay.events import DefinitionDeferred
from relay.testing import FakeClock, runs_of

pytest_plugins = ("celery.contrib.pytest",)

UTC = timezone.utc
START = datetime(2026, 12, 7, 8, 50, tzinfo=UTC)


@pytest.fixture
def relay_clock_start() -> datetime:
    return START


@pytest.fixture(scope="session")
def celery_config() -> dict[str, Any]:
    return {"broker_url": "memory://", "result_backend": "cache+memory://"}


@pytest.fixture
def app(celery_app: Celery, relay_store: str) -> Iterator[Celery]:
    relay_celery.install(celery_app, backend=relay_store)

    @celery_app.task(name="report")
    def report() -> None:
        pass

    yield celery_app


def test_a_changed_beat_entry_is_published_by_the_new_beat_only(
    app: Celery, relay_clock: FakeClock
) -> None:
    deferred: list[DefinitionDeferred] = []
    app.conf.beat_schedule = {"report": {"task": "report", "schedule": crontab(minute=0, hour=9)}}
    old = relay_celery.RelayScheduler(app)
    unsubscribe = old.decider.events.on(DefinitionDeferred, deferred.append)  # beat's global bus
    relay_clock.drive(old.tick)
    relay_clock.advance(minutes=5)
    app.conf.beat_schedule = {"report": {"task": "report", "schedule": crontab(minute=0, hour=10)}}
    new = relay_celery.RelayScheduler(app)
    try:
        relay_clock.drive(new.tick)
        relay_clock.advance(minutes=75)
    finally:
        unsubscribe()
        old.close()
        new.close()
    records = runs_of("report")
    assert [(r.scheduled_for, r.owner) for r in records] == [
        (START.replace(hour=10, minute=0), new.decider.owner)
    ]
    [event] = [e for e in deferred if e.owner == old.decider.owner]
    assert "0 9 * * *" in event.ours and "0 10 * * *" in event.deciding
