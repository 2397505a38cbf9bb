"""``async def`` periodic actors: refused without Dramatiq's AsyncIO middleware, run with it.

On Dramatiq's stub broker with a real in-process worker and a SQLite store, as in
``test_middleware.py``: the scheduler enqueues the run, the worker runs the coroutine on
Dramatiq's event loop thread, and the store records the run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AsyncIO

import relay
from relay.errors import ConfigurationError
from relay_dramatiq import RelayMiddleware, Scheduler, current_run, periodic, periodic_actors


def make_broker(db: str, *, asyncio_middleware: bool) -> StubBroker:
    broker = StubBroker()
    if asyncio_middleware:
        broker.add_middleware(AsyncIO())
    broker.add_middleware(RelayMiddleware(db, lease=5, heartbeat=1))
    broker.emit_after("process_boot")
    return broker


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'relay.db'}"


@pytest.fixture
def broker(db: str) -> Iterator[StubBroker]:
    broker = make_broker(db, asyncio_middleware=True)
    yield broker
    broker.close()


def test_an_async_actor_without_the_asyncio_middleware_is_refused(db: str) -> None:
    broker = make_broker(db, asyncio_middleware=False)
    try:

        async def refresh() -> None:
            await asyncio.sleep(0)

        actor = dramatiq.actor(refresh, broker=broker, actor_name="async_refused")
        with pytest.raises(
            ConfigurationError, match=r"broker.add_middleware\(dramatiq.middleware.AsyncIO\(\)\)"
        ):
            periodic(every=60)(actor)
        assert all(item.actor is not actor for item in periodic_actors())
    finally:
        broker.close()


def test_an_async_actor_with_the_asyncio_middleware_runs_its_coroutine(
    broker: StubBroker,
) -> None:
    seen: list[tuple[str, bool]] = []

    async def report() -> None:
        await asyncio.sleep(0.1)
        run = current_run()
        assert run is not None
        seen.append((run.id, threading.current_thread() is threading.main_thread()))

    actor = periodic(every=3600)(dramatiq.actor(report, broker=broker, actor_name="async_ok"))
    (item,) = [p for p in periodic_actors() if p.actor is actor]
    scheduler = Scheduler([item], clock=lambda: 7200.5)  # one slot due: 1970-01-01T02:00Z
    assert scheduler.run_pending()
    worker = dramatiq.Worker(broker, worker_timeout=50, worker_threads=1)
    worker.start()
    try:
        broker.join(actor.queue_name, fail_fast=True)
        worker.join()
    finally:
        worker.stop()
    assert seen == [("async_ok@1970-01-01T02:00:00Z", False)]
    backend: Any = item.middleware.backend
    (record,) = backend.runs("async_ok")
    assert record.state is relay.RunState.SUCCEEDED


def test_an_async_actor_called_outside_a_run_message_runs_as_dramatiq_runs_it(
    broker: StubBroker,
) -> None:
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        assert current_run() is None
        return 2 * n

    def plain(n: int) -> int:
        return n

    actor = dramatiq.actor(double, broker=broker, actor_name="async_direct")
    assert actor.fn is not double and actor.fn.__wrapped__ is not double  # supervised
    (loop,) = [m for m in broker.middleware if isinstance(m, AsyncIO)]
    loop.before_worker_boot(broker, None)  # what a worker does: start the event loop thread
    try:
        assert actor(21) == 42
    finally:
        loop.after_worker_shutdown(broker, None)
    plain_actor = dramatiq.actor(plain, broker=broker, actor_name="plain_direct")
    assert plain_actor.fn is plain
