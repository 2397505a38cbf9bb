"""Coroutine handlers and ``await scheduler.serve()``, on a real SQLite store.

Every run ends the way the store records it: these tests read the store, not only what the
handler saw. The races between processes are in ``tests/test_fastapi_example.py``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import events
from relay.engine.coroutines import is_coroutine_function
from tests.support import services
from tests.support.backends import unique

Events = list[events.Event]
# Every job is hourly; the schedulers' clock stays just after an hour's slot, so each job has
# exactly one run due (the store's own clock still decides leases).
SLOT = time.time() // 3600 * 3600
BLOCKS = 6.0
"""Seconds a plain handler blocks its own thread, far more than a loaded machine stalls a loop."""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'relay.db'}"


@pytest.fixture
def store(url: str) -> Iterator[relay.LeaseBackend]:
    backend = relay.open_backend(url)
    assert isinstance(backend, relay.LeaseBackend)
    yield backend
    backend.close()


def make(url: str, **options: Any) -> relay.Scheduler[Any]:
    return relay.Scheduler(url, clock=lambda: SLOT + 0.5, **options)


def recorded(scheduler: relay.Scheduler[Any]) -> Events:
    seen: Events = []
    scheduler.on(events.Event, seen.append)
    return seen


def of(seen: Events, kind: type[events.Event]) -> list[Any]:
    return [e for e in seen if isinstance(e, kind)]


def state(store: relay.LeaseBackend, run: str) -> relay.RunState:
    (record,) = [r for r in store.runs(None, limit=1000) if r.id == run]
    return record.state


def wait_until(predicate: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


async def until(predicate: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_an_async_handler_runs_to_its_end_under_run_pending(
    url: str, store: relay.LeaseBackend
) -> None:
    scheduler = make(url, lease=5, heartbeat=1)
    seen: list[Any] = []

    @scheduler.job(every=3600)
    async def report(run: relay.Run) -> None:
        await asyncio.sleep(0.3)
        seen.append((run.id, relay.current_run() is run))

    (run,) = scheduler.run_pending()
    assert scheduler.join(30)
    assert seen == [(run.id, True)]
    assert state(store, run.id) is relay.RunState.SUCCEEDED
    scheduler.shutdown()
    scheduler.backend.close()


def test_a_plain_handler_returning_a_coroutine_has_it_awaited(
    url: str, store: relay.LeaseBackend
) -> None:
    scheduler = make(url, lease=5, heartbeat=1)
    seen: list[str] = []

    async def work(run: relay.Run) -> None:
        await asyncio.sleep(0)
        seen.append(run.id)

    scheduler.job(every=3600, name="lambda")(lambda run: work(run))
    (run,) = scheduler.run_pending()
    assert scheduler.join(30)
    assert seen == [run.id]
    assert state(store, run.id) is relay.RunState.SUCCEEDED
    scheduler.shutdown()
    scheduler.backend.close()


def test_an_async_handler_that_raises_is_a_failed_attempt(
    url: str, store: relay.LeaseBackend
) -> None:
    scheduler = make(url, lease=5, heartbeat=1)
    seen = recorded(scheduler)

    @scheduler.job(every=3600, max_attempts=1)
    async def broken(run: relay.Run) -> None:
        await asyncio.sleep(0)
        raise TimeoutError("the API did not answer")

    (run,) = scheduler.run_pending()
    assert scheduler.join(30)
    (failed,) = of(seen, events.RunFailed)
    assert failed.error == "TimeoutError: the API did not answer"
    assert state(store, run.id) is relay.RunState.FAILED
    scheduler.shutdown()
    scheduler.backend.close()


def test_serve_runs_coroutines_on_the_app_loop_without_blocking_it(
    url: str, store: relay.LeaseBackend
) -> None:
    scheduler = make(url, lease=5, heartbeat=1, tick=0.1)
    where: list[Any] = []
    beats: list[float] = []

    @scheduler.job(every=3600)
    async def on_loop(run: relay.Run) -> None:
        where.append((threading.get_ident(), relay.current_run() is run))

    @scheduler.job(every=3600)
    def in_thread(run: relay.Run) -> None:
        where.append(threading.get_ident())
        time.sleep(BLOCKS)  # blocks its own thread only

    async def main() -> tuple[int, list[relay.RunRecord]]:
        async def beat() -> None:
            while True:
                beats.append(time.monotonic())
                await asyncio.sleep(0.02)

        beating = asyncio.ensure_future(beat())
        async with scheduler:
            done = {relay.RunState.SUCCEEDED}
            await until(lambda: {r.state for r in store.runs(None, 10)} == done and len(where) == 2)
        beating.cancel()
        return threading.get_ident(), store.runs(None, limit=10)

    loop_thread, runs = asyncio.run(main())
    assert (loop_thread, True) in where  # the coroutine ran as a task of the app's loop
    assert [w for w in where if isinstance(w, int)] != [loop_thread]
    assert {r.state for r in runs} == {relay.RunState.SUCCEEDED}
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    # the loop went on while the plain handler slept (a blocked loop would show a gap of BLOCKS
    # seconds; a loaded machine may stall it for a second or two, never for BLOCKS - 2)
    assert max(gaps) < BLOCKS - 2


def test_a_lost_run_cancels_its_coroutine_and_records_nothing_for_it(
    url: str, store: relay.LeaseBackend
) -> None:
    scheduler = make(url, lease=2, heartbeat=0.2, tick=0.1)
    seen = recorded(scheduler)
    attempts: list[tuple[int, str]] = []

    @scheduler.job(every=3600)
    async def slow(run: relay.Run) -> None:
        attempts.append((run.token, "start"))
        try:
            await asyncio.sleep(60 if run.attempt == 1 else 0)
        except asyncio.CancelledError:
            attempts.append((run.token, "cancelled"))
            raise
        attempts.append((run.token, "done"))

    async def main() -> None:
        async with scheduler:
            await until(lambda: bool(attempts))
            first = of(seen, events.RunStarted)[0]
            # Another party takes the run away: the store no longer knows the first token.
            await asyncio.to_thread(store.release, first.run_id, first.token)
            # Cancelled while the instance serves, not by the loop's end.
            await until(lambda: (first.token, "cancelled") in attempts)
            await until(lambda: any(what == "done" for _, what in attempts))

    asyncio.run(main())
    (first, _), (second, _) = [a for a in attempts if a[1] == "start"]
    assert (first, "cancelled") in attempts  # CancelledError inside the handler
    assert (first, "done") not in attempts
    assert (second, "done") in attempts and second > first
    assert [e.token for e in of(seen, events.FencedOff)] == [first]
    assert [e.token for e in of(seen, events.RunSucceeded)] == [second]
    assert not of(seen, events.RunFailed)  # the lost attempt is not recorded as anything
    (run,) = store.runs(None, limit=10)
    assert (run.state, run.token, run.failures) == (relay.RunState.SUCCEEDED, second, 0)


def test_cancelling_serve_hands_a_running_coroutine_over(
    url: str, store: relay.LeaseBackend
) -> None:
    scheduler = make(url, lease=30, heartbeat=1, tick=0.1, stop_timeout=0.5)
    seen = recorded(scheduler)
    attempts: list[str] = []

    @scheduler.job(every=3600)
    async def slow(run: relay.Run) -> None:
        attempts.append("start")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            attempts.append("cancelled")
            raise

    async def main() -> None:
        serving = asyncio.ensure_future(scheduler.serve())
        await until(lambda: attempts == ["start"])
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        await until(lambda: attempts == ["start", "cancelled"])

    asyncio.run(main())
    (handed,) = of(seen, events.RunHandedOver)
    assert not of(seen, events.RunSucceeded) and not of(seen, events.RunFailed)
    assert not of(seen, events.FencedOff)
    assert state(store, handed.run_id) is relay.RunState.PENDING  # another instance takes it now
    with pytest.raises(Exception, match="closed"):  # serve() closed the store it opened
        scheduler.backend.runs(None, limit=1)


def test_leaving_async_with_lets_a_short_run_finish(url: str, store: relay.LeaseBackend) -> None:
    scheduler = make(url, lease=30, heartbeat=1, tick=0.1, stop_timeout=30)
    started = threading.Event()

    @scheduler.job(every=3600)
    async def short(run: relay.Run) -> None:
        started.set()
        await asyncio.sleep(0.5)

    async def main() -> None:
        async with scheduler:
            await until(started.is_set)
        # The block's end waited for the run: it finished and was recorded.

    asyncio.run(main())
    (run,) = store.runs(None, limit=10)
    assert run.state is relay.RunState.SUCCEEDED


def test_stop_from_a_handler_ends_serve(url: str) -> None:
    scheduler = make(url, lease=30, heartbeat=1, tick=60)

    @scheduler.job(every=3600)
    async def last(run: relay.Run) -> None:
        scheduler.stop()

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(scheduler.serve(), 30))
    assert time.monotonic() - started < 20  # not the 60 s tick: stop() woke serve() up


class AsyncCallable:
    async def __call__(self, run: relay.Run) -> None:
        await asyncio.sleep(0)


async def takes_two(run: relay.Run, label: str) -> None:
    await asyncio.sleep(0)


def test_coroutine_functions_are_recognised_in_every_form() -> None:
    assert is_coroutine_function(takes_two)
    assert is_coroutine_function(functools.partial(takes_two, label="x"))
    assert is_coroutine_function(AsyncCallable())
    assert is_coroutine_function(AsyncCallable().__call__)
    assert not is_coroutine_function(lambda run: takes_two(run, "x"))
    assert not is_coroutine_function(AsyncCallable)  # the class: calling it makes an instance
    assert not is_coroutine_function(print)


@pytest.mark.rabbitmq
def test_rabbitmq_consumer_mode_refuses_an_async_handler() -> None:
    base = services.require("rabbitmq")
    scheduler = relay.Scheduler(f"{base}?mode=consumer&prefix={unique()}")
    try:

        async def tick(run: relay.Run) -> None:
            await asyncio.sleep(0)

        with pytest.raises(relay.ConfigurationError, match=r"is async def, but RabbitMQ consumer"):
            scheduler.job(every=60)(tick)
        with pytest.raises(relay.ConfigurationError, match=r"make it a plain def"):
            scheduler.job(every=60, name="callable")(AsyncCallable())
        assert not scheduler.jobs
    finally:
        scheduler.backend.close()


class FailingDispatcher:
    """Stands for a dispatcher whose consumers cannot start: serve() fails at once."""

    def serve(self, *args: Any) -> None:
        raise RuntimeError("consumers could not start")

    def stop_serving(self, timeout: float) -> None: ...


def test_serve_failing_in_async_with_is_logged_at_once_and_raised_at_the_end(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = make(url, lease=30, heartbeat=1)
    scheduler._dispatcher = FailingDispatcher()  # type: ignore[assignment]

    async def main() -> None:
        async with scheduler:
            await until(lambda: "stopped serving" in caplog.text)

    with pytest.raises(RuntimeError, match="consumers could not start"):
        asyncio.run(main())
    assert "consumers could not start" in caplog.text


def test_heartbeats_go_on_while_a_coroutine_awaits_past_its_lease(
    url: str, store: relay.LeaseBackend
) -> None:
    """A 6 s coroutine on a 3 s lease, with another instance sweeping for expired runs.

    The lease keeps seconds of margin over a heartbeat a loaded machine delays."""
    instances = [make(url, lease=3, heartbeat=0.5, tick=0.1, owner=f"i{i}") for i in (1, 2)]
    starts: list[tuple[str, int]] = []

    for scheduler in instances:

        @scheduler.job(every=3600, name="long")
        async def long(run: relay.Run) -> None:
            starts.append((run.owner, run.attempt))
            await asyncio.sleep(6)

    async def main() -> None:
        async with instances[0], instances[1]:
            await until(lambda: bool(store.runs("long")) and store.runs("long")[0].state.final)

    asyncio.run(main())
    assert len(starts) == 1 and starts[0][1] == 1  # never taken over: its lease was renewed
    (run,) = store.runs("long")
    assert (run.state, run.attempt) == (relay.RunState.SUCCEEDED, 1)


def test_a_busy_default_executor_does_not_hold_the_instance_back(url: str) -> None:
    scheduler = make(url, lease=5, heartbeat=1, tick=0.1)
    started = threading.Event()

    @scheduler.job(every=3600)
    async def job(run: relay.Run) -> None:
        started.set()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(1))
        release = threading.Event()
        busy = loop.run_in_executor(None, release.wait, 60)  # the app's only worker is taken
        try:
            async with scheduler:
                await until(started.is_set, timeout=20)
        finally:
            release.set()
            await busy

    asyncio.run(main())
