"""The clocks Relay reads when none is injected: the host's, unless a test installed a fake one.

The engine's deciding and running halves, the Dramatiq scheduler, Celery beat's wake-ups and the
SQLite backends read :func:`time` (seconds since the epoch) and :func:`monotonic` by default.
Outside a test they are :func:`time.time` and :func:`time.monotonic`. :mod:`relay.testing`
installs one fake clock for both while a test runs, so everything that test makes, a store opened
from a URL by Celery beat or a worker included, reads fake time. PostgreSQL, Redis and NATS stores
keep their servers' clocks: the fake one reaches only the embedded SQLite store.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable

from relay.errors import ConfigurationError

__all__ = ["install", "installed", "monotonic", "time"]

Clock = Callable[[], float]
_installed: Clock | None = None


def time() -> float:
    """Seconds since the epoch: the installed clock's, or the host's."""
    return _time.time() if _installed is None else _installed()


def monotonic() -> float:
    """A clock that never goes back, for timers: the installed clock, or the host's monotonic."""
    return _time.monotonic() if _installed is None else _installed()


def installed() -> Clock | None:
    """The clock :func:`install` put in place, or ``None``: Relay reads the host's clocks."""
    return _installed


def install(clock: Clock) -> Callable[[], None]:
    """Make ``clock`` (seconds since the epoch, never going back) Relay's clock in this process.

    Returns the function that puts the host's clocks back. One clock at a time: a second
    install raises :class:`~relay.errors.ConfigurationError`.
    """
    global _installed
    if _installed is not None:
        raise ConfigurationError(
            "a fake clock is already installed in this process: use the one you have (the "
            "relay_clock fixture), or uninstall it first"
        )
    _installed = clock

    def uninstall() -> None:
        global _installed
        if _installed is clock:
            _installed = None

    return uninstall
