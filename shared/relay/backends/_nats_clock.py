"""The NATS server's clock between two reads of it, as a lower bound.

Reading the clock (the ``ts`` field of stream info) is the dearest request of a lease step: the
server builds the whole stream's info for it. :class:`ServerClock` keeps the last reading and
adds the local monotonic time elapsed since the reply arrived, scaled down by :data:`DRIFT`, so
its estimate is never ahead of the server's clock: a lease judged expired by it has expired by the
server's clock too, and an expiry written from it is at most a request's round trip early (the
holder renews every heartbeat, a fraction of the lease). A reading older than :data:`RESYNC`
seconds is not used: the next step reads the clock again, so a server whose clock was stepped is
followed within that long.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

__all__ = ["DRIFT", "RESYNC", "ServerClock"]

RESYNC = 1.0
"""Seconds a clock reading is used for before the server is asked again."""
DRIFT = 1e-3
"""How much faster than the server's the local monotonic clock may run (1,000 ppm, twice the
most NTP slews a clock)."""


class ServerClock:
    """The server's time in ms: read through ``read`` at most every :data:`RESYNC` seconds."""

    def __init__(self, read: Callable[[], Awaitable[int]]) -> None:
        self._read = read
        self._ms = 0
        self._at: float | None = None

    async def now_ms(self) -> int:
        """A lower bound of the server's clock now."""
        if self._at is not None:
            elapsed = time.monotonic() - self._at
            if 0 <= elapsed < RESYNC:
                return self._ms + int(elapsed * (1 - DRIFT) * 1000)
        ms = await self._read()
        # Taken when the reply arrived: the server's clock was at least ``ms`` then.
        self._ms, self._at = ms, time.monotonic()
        return ms

    def forget(self) -> None:
        """Read the clock from the server at the next step (after an error)."""
        self._at = None
