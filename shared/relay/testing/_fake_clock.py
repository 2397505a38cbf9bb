"""A fake clock that Relay's engine and its SQLite store read, and that runs what falls due."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from relay import clock as relay_clock
from relay.backends import open_backend
from relay.errors import ConfigurationError
from relay.runs import AWARE_HINT
from relay.scheduler import Scheduler
from relay.testing._hosts import Host, InlineScheduler, SteppedHost

__all__ = ["DEFAULT_START", "FakeClock"]

UTC = timezone.utc
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
"""Where a :class:`FakeClock` starts unless told otherwise (a Thursday, midnight UTC)."""
_SAME_INSTANT_STEPS = 1000
"""Steps at one fake instant after which a host that never waits is reported."""

T = TypeVar("T")


class FakeClock:
    """Fake time for tests: seconds since the epoch that move only when told to.

    Pass it where Relay takes a clock (``relay.Scheduler(url, clock=fake)``), or install it for
    the whole process (:meth:`installed`; the ``relay_clock`` fixture does) so the engine, Celery
    beat, the Dramatiq scheduler and the SQLite store read it; a driven scheduler reads it too.
    :meth:`advance` moves it forward and, at each instant on the way that a driven host asks for,
    steps that host: slots fall due in order, retries and takeovers happen as fake time passes,
    and nothing sleeps.
    """

    def __init__(self, start: datetime | float = DEFAULT_START) -> None:
        self._now = _seconds(start, "start")
        self._hosts: list[Host] = []
        self._advancing = False
        self.test_store: str | None = None
        """The URL of the test's fresh store (the ``relay_clock`` fixture sets it): a driven
        scheduler that opened another store from a URL (an application's own) is moved onto it,
        so each test, and each run of a test, starts from an empty store."""
        self._opened: list[Any] = []

    def __call__(self) -> float:
        """The fake time in seconds since the epoch: what Relay reads."""
        return self._now

    def now(self) -> datetime:
        """The fake time as an aware UTC datetime."""
        return datetime.fromtimestamp(self._now, UTC)

    def drive(self, host: T, *, settle: Callable[[], object] | None = None) -> T:
        """Step ``host`` as fake time passes; returns it.

        ``host`` is a :class:`relay.Scheduler` (its engine then reads this clock, and each run it
        wins is run here, in order, before the clock moves on; with a :attr:`test_store`, a
        scheduler opened from another URL without this clock, such as an application's own, is
        moved onto the test's store first, keeping its jobs and tasks), or a function that steps
        a host and returns the seconds until it wants to be stepped again: Celery beat's
        ``RelayScheduler.tick``, the Dramatiq scheduler's ``step``. ``settle``, called after each
        step of such a function, waits for what the step dispatched (see
        :func:`relay.testing.settle`).
        """
        if isinstance(host, Scheduler):
            self._onto_test_store(host)
            self._hosts.append(InlineScheduler(host, self))
        elif callable(host):
            self._hosts.append(SteppedHost(host, settle))
        else:
            raise ConfigurationError(
                f"drive() takes a relay.Scheduler or a function stepping a host (beat.tick, "
                f"scheduler.step), not {host!r}"
            )
        return host

    def stop(self, host: object) -> None:
        """Stop stepping ``host`` (a scheduler or step function given to :meth:`drive`), as
        if that instance stopped: its heartbeat record ages and its peers see it die. Nothing
        if it is not driven."""
        self._hosts = [h for h in self._hosts if _driven(h) != host]  # == : bound methods

    def advance(
        self,
        seconds: float | timedelta = 0.0,
        *,
        minutes: float = 0.0,
        hours: float = 0.0,
        days: float = 0.0,
    ) -> None:
        """Move forward by the sum of the arguments, running everything that falls due."""
        delta = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        if isinstance(delta, bool) or not isinstance(delta, int | float):
            raise ConfigurationError(
                f"advance({seconds!r}): give seconds as a number or a timedelta"
            )
        total = delta + 60 * minutes + 3600 * hours + 86400 * days
        if not math.isfinite(total) or total < 0:
            raise ConfigurationError(
                f"a fake clock only goes forward, and advance() was asked to move it by "
                f"{total:g}s: advance by a positive duration, or start the test's clock earlier "
                "(FakeClock(start=...), or override the relay_clock_start fixture)"
            )
        self._move_to(self._now + total)

    def advance_to(self, when: datetime) -> None:
        """Move forward to ``when`` (an aware datetime), running everything that falls due."""
        target = _seconds(when, "advance_to")
        if target < self._now:
            raise ConfigurationError(
                f"a fake clock only goes forward: it is {self.now().isoformat()}, and "
                f"advance_to({when.isoformat()}) would move it back; start the test's clock "
                "earlier (FakeClock(start=...), or override the relay_clock_start fixture)"
            )
        self._move_to(target)

    @contextmanager
    def installed(self) -> Iterator[FakeClock]:
        """Make this Relay's clock in this process (:mod:`relay.clock`) for the ``with`` block."""
        uninstall = relay_clock.install(self)
        try:
            yield self
        finally:
            uninstall()
            opened, self._opened = self._opened, []
            for backend in opened:  # the test stores drive() opened
                backend.close()

    def _onto_test_store(self, scheduler: Scheduler[Any]) -> None:
        """Move a scheduler opened from another URL onto :attr:`test_store` (lease stores).

        A scheduler built with this clock (``relay.Scheduler(url, clock=fake)``) was built by the
        test, on the store it chose (a fleet on one shared store, a store of each kind): it stays
        there. Only one built without it, an application's own, is moved."""
        url = self.test_store
        if url is None or scheduler._url == url or scheduler.backend.capability != "lease":
            return
        if scheduler._clock is self:
            return
        backend = open_backend(url)
        self._opened.append(backend)
        scheduler._move_to(backend, url)

    def _move_to(self, target: float) -> None:
        if self._advancing:
            raise ConfigurationError(
                "advance() was called while the fake clock was already advancing (from a "
                "handler it runs?): a handler takes no fake time; advance from the test instead"
            )
        self._advancing = True
        try:
            for host in self._hosts:
                host.poke(self._now)
            self._run_until(target)
            self._now = target
        finally:
            self._advancing = False

    def _run_until(self, target: float) -> None:
        same_instant = 0
        while self._hosts:
            due = min(self._hosts, key=lambda host: host.next_at())
            at = max(due.next_at(), self._now)
            if at > target:
                return
            same_instant = same_instant + 1 if at == self._now else 0
            if same_instant > _SAME_INSTANT_STEPS:
                raise ConfigurationError(
                    f"a driven host asked to be stepped again at {self.now().isoformat()} "
                    f"{_SAME_INSTANT_STEPS} times: its step must return the seconds to wait"
                )
            self._now = at
            due.step(at)


def _driven(host: Host) -> object:
    """What :meth:`FakeClock.drive` was given for ``host``."""
    if isinstance(host, InlineScheduler):
        return host.scheduler
    return host.driven if isinstance(host, SteppedHost) else host


def _seconds(value: Any, name: str) -> float:
    """``value`` (an aware datetime, or seconds since the epoch) in seconds since the epoch."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigurationError(f"{name}={value.isoformat()} is naive: {AWARE_HINT}")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(
            f"{name}={value!r}: give an aware datetime or seconds since the epoch"
        )
    return float(value)
