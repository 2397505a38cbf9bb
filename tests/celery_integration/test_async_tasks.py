"""A Celery task that is ``async def`` cannot run: beat and workers refuse it when they start.

Celery calls a task and gets a coroutine it never awaits; without these checks the run would be
recorded succeeded and its work never done.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery

from relay.backends import open_backend
from relay.contract import AcquireRequest
from relay.errors import ConfigurationError
from relay.runs import RunState
from relay_celery import RelayScheduler, install
from relay_celery.config import CelerySettings
from relay_celery.worker import RelayStep, RunHooks

REFUSED = (
    r"task 'refresh' \(beat_schedule entry 'nightly'\) is async def, but Celery workers call "
    r"tasks synchronously: .* asyncio.run\(main\(\)\)"
)

AWAITABLE = r"body returned 'coroutine', an awaitable, which Celery cannot await"


def make_app(tmp_path: Path) -> Celery:
    app = Celery("relay_async", broker="memory://")
    app.conf.update(
        task_default_queue=f"q_{tmp_path.name}",
        relay_backend=f"sqlite:///{tmp_path / 'relay.db'}",
        beat_schedule={"nightly": {"task": "refresh", "schedule": 60}},
    )
    install(app)

    @app.task(name="refresh", shared=False)
    async def refresh() -> None:
        await asyncio.sleep(0)

    return app


def test_a_worker_refuses_an_async_scheduled_task(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=REFUSED):
        RelayStep(SimpleNamespace(app=make_app(tmp_path)))


def test_beat_refuses_an_async_scheduled_task(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=REFUSED):
        RelayScheduler(make_app(tmp_path))


def test_an_async_task_no_entry_schedules_is_left_alone(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    app.conf.beat_schedule = {}
    RelayStep(SimpleNamespace(app=app))


def test_a_task_returning_a_coroutine_fails_its_attempt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    store = open_backend(url)
    try:
        assert store.capability == "lease"
        slot = datetime(2026, 11, 29, 12, tzinfo=timezone.utc)
        request = AcquireRequest(job="j", slot=slot, owner="beat", lease=60, max_attempts=1)
        run = store.acquire(request).run
        assert run is not None

        async def work() -> None:
            await asyncio.sleep(0)

        def body() -> object:
            return work()  # a plain task that hands Celery a coroutine

        hooks = RunHooks(CelerySettings(url, lease=5, heartbeat=1, queue_lease=60))
        try:
            with pytest.raises(TypeError, match=AWAITABLE):
                hooks.execute(run, body, (), {}, max_attempts=1)
        finally:
            hooks.runner().backend.close()
        (record,) = store.runs("j")
        assert record.state is RunState.FAILED  # not succeeded, its work never done
        assert record.error is not None and re.search(AWAITABLE, record.error)
    finally:
        store.close()
