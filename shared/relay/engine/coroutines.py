"""Coroutine handlers: run to completion on an event loop, cancelled once their run is lost.

A handler is called as any other; when it returns an awaitable (an ``async def`` handler, or a
plain function returning a coroutine), the awaitable runs to its end as a task of an event loop:
the loop an application serves the scheduler from, or one of its own for the run. While it
awaits, the run's lease is renewed from the heartbeat thread as for any handler. Once the run is
lost (:attr:`relay.Run.lost`, whatever set it) the task is cancelled: the handler sees
``asyncio.CancelledError`` where it awaits, and the call raises :class:`~relay.errors.LeaseLost`,
so the engine records the attempt the way it records any lost one. No coroutine is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from relay.runs import Run

__all__ = ["LOST_CHECK", "call_handler", "is_coroutine_function", "not_awaitable", "supervise"]

LOST_CHECK = 0.05
"""Seconds between two looks at :attr:`relay.Run.lost` while a coroutine handler runs."""
_LOOP_CHECK = 0.5
_CANCELLED = "run {}: its task was cancelled before it finished, not because the run was lost"


def is_coroutine_function(handler: object) -> bool:
    """Whether calling ``handler`` gives a coroutine: an ``async def`` function or method, a
    ``functools.partial`` of one, or an object whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(handler):
        return True
    if inspect.isroutine(handler) or not callable(handler):
        return False
    return inspect.iscoroutinefunction(type(handler).__call__)


def call_handler(
    handler: Callable[[Run], Any], run: Run, loop: asyncio.AbstractEventLoop | None = None
) -> Any:
    """Call ``handler(run)``; an awaitable it returns is run to its end, and its result returned.

    The awaitable runs as a task of ``loop`` (a running loop in another thread: this thread
    waits) or, without one, of a new event loop in this thread. It is cancelled once ``run`` is
    lost (:func:`supervise`).
    """
    result = handler(run)
    if not inspect.isawaitable(result):
        return result
    if loop is not None:
        return _wait(_submit(supervise(result, run), result, loop, run), loop, run)
    try:
        return asyncio.run(supervise(result, run))
    except asyncio.CancelledError:  # the handler cancelled its own task
        raise RuntimeError(_CANCELLED.format(run.id)) from None


def not_awaitable(value: Any, handler: object, host: str) -> Any:
    """``value``, a handler's result, unless it is awaitable: then ``TypeError`` naming the fix.

    For hosts that call handlers synchronously (``host``: "Celery", "RabbitMQ consumer mode"):
    the attempt fails instead of being recorded succeeded with its work never done. A coroutine
    is closed first, so Python does not warn that it was never awaited.
    """
    if not inspect.isawaitable(value):
        return value
    if inspect.iscoroutine(value):
        value.close()
    name = getattr(handler, "__qualname__", repr(handler))
    raise TypeError(
        f"{name} returned {type(value).__name__!r}, an awaitable, which {host} cannot await: "
        "make it run the coroutine to its end itself, such as with asyncio.run(...)"
    )


async def supervise(awaitable: Awaitable[Any], run: Run) -> Any:
    """Await ``awaitable`` in this task; once ``run.lost`` is set, cancel it, raise ``LeaseLost``.

    The handler sees ``asyncio.CancelledError`` where it awaits; whether it lets it go on or
    not, the call raises :class:`~relay.errors.LeaseLost`. Cancelled by anything else, it
    raises ``CancelledError`` as any task does.
    """
    task, loop = asyncio.current_task(), asyncio.get_running_loop()
    assert task is not None
    lost = False
    timer: list[asyncio.TimerHandle] = []

    def look() -> None:
        nonlocal lost
        if run.lost.is_set():
            lost = True
            task.cancel()
        else:
            timer[:] = [loop.call_later(LOST_CHECK, look)]

    look()
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if lost:
            run.check()  # raises LeaseLost
        raise
    finally:
        for handle in timer:
            handle.cancel()
    if lost:  # the handler swallowed the cancellation: the run is lost all the same
        run.check()
    return result


def _submit(
    supervised: Coroutine[Any, Any, Any],
    awaitable: Awaitable[Any],
    loop: asyncio.AbstractEventLoop,
    run: Run,
) -> concurrent.futures.Future[Any]:
    """Start ``supervised`` on ``loop``; if the loop is closed, close both coroutines and say so."""
    try:
        return asyncio.run_coroutine_threadsafe(supervised, loop)
    except RuntimeError:
        supervised.close()
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise RuntimeError(f"run {run.id}: the event loop serving it is closed") from None


def _wait(future: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop, run: Run) -> Any:
    """The result of ``future``, running on ``loop``; ``RuntimeError`` if the loop stops first."""
    while True:
        try:
            return future.result(timeout=_LOOP_CHECK)
        except concurrent.futures.TimeoutError:
            if future.done():  # the handler raised TimeoutError itself
                break
            if not loop.is_running():
                future.cancel()
                raise RuntimeError(
                    f"run {run.id}: the event loop serving it stopped before it finished"
                ) from None
        except concurrent.futures.CancelledError:
            raise RuntimeError(_CANCELLED.format(run.id)) from None
    return future.result(timeout=0)
