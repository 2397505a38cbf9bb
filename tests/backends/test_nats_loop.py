"""The NATS backends' private event loop (``relay.backends._nats_loop``): no server needed."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from relay.backends._nats_loop import LoopThread
from relay.errors import BackendUnavailable


def test_a_call_that_timed_out_is_unwound_before_the_loop_closes() -> None:
    """A timed-out call's task is cancelled; close() lets it finish its way out (a connect closes
    its socket), instead of leaving it pending for the garbage collector to destroy later."""
    unwound: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # clean-up that takes the loop a few more turns
            unwound.append("cleaned up")
            raise

    loop = LoopThread()
    with pytest.raises(BackendUnavailable):
        loop.run(slow(), timeout=0.1)
    loop.close()
    assert unwound == ["cleaned up"]
    assert loop.closed


def test_close_does_not_wait_long_for_a_task_that_ignores_cancellation() -> None:
    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                continue

    loop = LoopThread()
    with pytest.raises(BackendUnavailable):
        loop.run(stubborn(), timeout=0.1)
    started = time.monotonic()
    loop.close()
    assert time.monotonic() - started < 5
    loop.close()  # idempotent
    gc.collect()


def test_a_closed_loop_refuses_calls() -> None:
    loop = LoopThread()
    loop.close()
    coro = asyncio.sleep(0)
    with pytest.raises(BackendUnavailable, match="closed"):
        loop.run(coro, timeout=1)
