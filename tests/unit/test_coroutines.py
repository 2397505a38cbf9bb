"""``relay.engine.coroutines`` alone: how an awaited handler ends, lost or not."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timezone

import pytest

from relay.engine.coroutines import LOST_CHECK, call_handler, not_awaitable
from relay.errors import LeaseLost
from relay.runs import Run

SLOT = datetime(2026, 11, 29, 12, tzinfo=timezone.utc)


def a_run() -> Run:
    return Run("job@2026-11-29T12:00:00Z", "job", SLOT, 1, 7, "me")


def test_a_result_and_an_error_come_back_as_from_a_plain_call() -> None:
    async def ok(run: Run) -> str:
        await asyncio.sleep(0)
        return run.id

    async def broken(run: Run) -> None:
        await asyncio.sleep(0)
        raise KeyError("gone")

    assert call_handler(ok, a_run()) == "job@2026-11-29T12:00:00Z"
    assert call_handler(lambda run: 42, a_run()) == 42
    with pytest.raises(KeyError, match="gone"):
        call_handler(broken, a_run())


def test_a_run_lost_before_it_starts_never_gets_past_its_first_await() -> None:
    steps: list[str] = []

    async def handler(run: Run) -> None:
        steps.append("before")
        await asyncio.sleep(10)
        steps.append("after")

    run = a_run()
    run.lost.set()
    with pytest.raises(LeaseLost, match="token 7"):
        call_handler(handler, run)
    assert steps == ["before"]


def test_a_handler_swallowing_the_cancellation_is_still_lost() -> None:
    async def stubborn(run: Run) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "finished anyway"
        return "slept"

    run = a_run()
    threading.Timer(LOST_CHECK, run.lost.set).start()
    with pytest.raises(LeaseLost):
        call_handler(stubborn, run)


def test_a_handler_cancelling_itself_is_a_failure_not_a_lost_run() -> None:
    async def quitter(run: Run) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    with pytest.raises(RuntimeError, match="cancelled before it finished, not because the run"):
        call_handler(quitter, a_run())


def test_on_another_loop_the_caller_waits_and_gets_the_result() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    seen: list[bool] = []

    async def on_loop(run: Run) -> int:
        seen.append(asyncio.get_running_loop() is loop)
        await asyncio.sleep(0.1)
        return 5

    try:
        assert call_handler(on_loop, a_run(), loop) == 5
        assert seen == [True]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_a_host_that_cannot_await_refuses_an_awaitable_and_closes_it() -> None:
    async def work() -> None:
        await asyncio.sleep(0)

    coroutine = work()
    with pytest.raises(TypeError, match=r"returned 'coroutine', an awaitable, which Celery cannot"):
        not_awaitable(coroutine, work, "Celery")
    assert coroutine.cr_frame is None  # closed: no "never awaited" warning later
    assert not_awaitable(3, work, "Celery") == 3


def test_a_closed_loop_fails_the_call_and_leaves_no_coroutine_unawaited() -> None:
    loop = asyncio.new_event_loop()
    loop.close()

    async def handler(run: Run) -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="the event loop serving it is closed"):
        call_handler(handler, a_run(), loop)
