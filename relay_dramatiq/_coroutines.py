"""``async def`` actors on run messages: cancelled once their run is lost, as standalone handlers.

Dramatiq runs an ``async def`` actor through ``dramatiq.asyncio.async_to_sync``: the worker
thread waits while the coroutine runs as a task of the AsyncIO middleware's event loop thread.
An actor declared with a :class:`~relay_dramatiq.RelayMiddleware` on its broker has that
coroutine function wrapped (:func:`supervise_coroutine`): on a run message its coroutine runs
under :func:`relay.engine.coroutines.supervise`, so once the run is lost (the store refused the
token, the lease was let go, the run was handed over) the task is cancelled, the actor sees
``asyncio.CancelledError`` where it awaits, and the call raises
:class:`~relay.errors.LeaseLost`. The middleware then records the attempt as the standalone host
does: nothing more for a token the store refused. Called outside a run message, the coroutine
runs as Dramatiq would run it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import dramatiq
from dramatiq.asyncio import async_to_sync

from relay.engine import current_run
from relay.engine.coroutines import supervise

__all__ = ["supervise_coroutine"]

_SUPERVISED = "__relay_supervised__"


async def _nothing() -> None:
    """Only to learn the code of the wrapper ``async_to_sync`` makes."""


_DRAMATIQ_WRAPPER = async_to_sync(_nothing).__code__


def supervise_coroutine(actor: dramatiq.Actor[Any, Any]) -> None:
    """Make ``actor``'s coroutine, if it is ``async def``, cancelled once its run is lost.

    Only the wrapper Dramatiq made for an ``async def`` function is replaced (by the same
    wrapper around :func:`_supervised`); a plain actor, or one wrapped already, is left as it is.
    """
    wrapper = actor.fn
    fn = getattr(wrapper, "__wrapped__", None)
    if getattr(wrapper, "__code__", None) is not _DRAMATIQ_WRAPPER or fn is None:
        return
    if not inspect.iscoroutinefunction(fn) or getattr(fn, _SUPERVISED, False):
        return
    actor.fn = async_to_sync(_supervised(fn))


def _supervised(
    fn: Callable[..., Coroutine[Any, Any, Any]],
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(fn)
    async def supervised(*args: Any, **kwargs: Any) -> Any:
        # Dramatiq starts this task from the worker thread, in a copy of its context: the run
        # the middleware started for the message, if any, is current here too.
        run = current_run()
        if run is None:
            return await fn(*args, **kwargs)
        return await supervise(fn(*args, **kwargs), run)

    setattr(supervised, _SUPERVISED, True)
    return supervised
