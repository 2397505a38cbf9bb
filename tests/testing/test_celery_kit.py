"""Celery beat's ticks on the fake clock, the tasks run by Celery's own embedded test worker.

Celery's ``celery_app`` and ``celery_worker`` fixtures (``celery.contrib.pytest``: an in-memory
broker and a worker thread) run the tasks; ``RelayScheduler.tick`` is driven by the fake clock,
and :func:`relay.testing.settle` waits after each tick for the worker to finish what it published.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

import relay.testing
import relay_celery
from relay.runs import RunState
from relay.testing import FakeClock, runs_of

pytest_plugins = ("celery.contrib.pytest",)

UTC = timezone.utc
SLOT = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
attempts: list[tuple[str, int, datetime]] = []


@pytest.fixture(scope="session")
def celery_config() -> dict[str, Any]:
    """Celery's in-memory test broker, polled every 10 ms rather than every second."""
    return {
        "broker_url": "memory://",
        "result_backend": "cache+memory://",
        "broker_transport_options": {"polling_interval": 0.01},
    }


@pytest.fixture
def app(celery_app: Celery, relay_store: str, relay_clock: FakeClock) -> Iterator[Celery]:
    """The test app with Relay installed and one beat entry, every 15 minutes."""
    relay_celery.install(celery_app, backend=relay_store)
    celery_app.conf.beat_schedule = {
        "report": {"task": "report", "schedule": crontab(minute="*/15")},
    }

    @celery_app.task(name="report")
    def report() -> None:
        run = relay_celery.current_run()
        assert run is not None
        attempts.append((run.id, run.attempt, relay_clock.now()))
        if run.scheduled_for == SLOT and run.attempt == 1:
            raise RuntimeError("the report server is down")

    attempts.clear()
    yield celery_app


def test_beat_follows_the_fake_clock_and_the_worker_runs_and_retries(
    app: Celery, celery_worker: Any, relay_clock: FakeClock
) -> None:
    beat = relay_celery.RelayScheduler(app)
    try:
        relay_clock.drive(beat.tick, settle=relay.testing.settle)
        relay_clock.advance(hours=1)
    finally:
        beat.close()
    slots = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=15 * k) for k in range(5)]
    records = runs_of("report")
    assert [r.scheduled_for for r in records] == slots
    assert all(r.state is RunState.SUCCEEDED for r in records)
    assert [(r.attempt, r.failures) for r in records] == [(1, 0)] * 2 + [(2, 1)] + [(1, 0)] * 2
    # The retry was published at beat's next sweep, a heartbeat (10 s) after the failure.
    retried = [(attempt, at) for run_id, attempt, at in attempts if run_id.endswith("00:30:00Z")]
    assert retried == [(1, SLOT), (2, SLOT + timedelta(seconds=10))]
