"""Test your schedules without waiting: a fake clock, a fresh store per test, and what ran.

Installing Relay registers its pytest plugin, :mod:`relay.testing.plugin` (the ``[testing]`` extra
adds pytest itself). Its fixtures are ``relay_clock`` (a :class:`FakeClock` installed as Relay's
clock for the test), ``relay_store`` (the URL of a fresh SQLite store on that clock) and
``relay_scheduler`` (a :class:`relay.Scheduler` on that store, driven by the clock)::

    def test_refresh_runs_every_five_minutes(relay_clock, relay_scheduler):
        @relay_scheduler.job(cron="*/5 * * * *")
        def refresh(run): ...

        relay_clock.advance(hours=1)
        assert len(relay.testing.runs_of("refresh")) == 12

Nothing sleeps: :meth:`FakeClock.advance` runs every slot that falls due, in order, and the
retries and takeovers that fake time brings.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from relay import clock as relay_clock
from relay.backends import open_backend
from relay.contract import LeaseBackend, is_lease
from relay.errors import ConfigurationError
from relay.runs import RunRecord, RunState
from relay.testing._fake_clock import DEFAULT_START, FakeClock
from relay.testing._hosts import SimulatedCrash

__all__ = [
    "DEFAULT_START",
    "FakeClock",
    "SimulatedCrash",
    "advance",
    "current_store",
    "runs_of",
    "settle",
    "use_store",
]

_ALL_RUNS = 10**9
_store: str | None = None


def advance(
    seconds: float | timedelta = 0.0, *, minutes: float = 0.0, hours: float = 0.0, days: float = 0.0
) -> None:
    """:meth:`FakeClock.advance` on the fake clock installed for the current test."""
    clock = relay_clock.installed()
    if not isinstance(clock, FakeClock):
        raise ConfigurationError(
            "relay.testing.advance() moves the fake clock of a test, and none is installed: "
            "call it in a test that uses the relay_clock fixture (Relay's pytest plugin, "
            "relay.testing.plugin, provides it), or make a FakeClock and call its advance()"
        )
    clock.advance(seconds, minutes=minutes, hours=hours, days=days)


def use_store(url: str | None) -> None:
    """Make ``url`` the store :func:`runs_of` and :func:`settle` read by default (``None``: none).

    The ``relay_store`` fixture does this for its test.
    """
    global _store
    _store = url


def current_store() -> str:
    """The URL of the current test's store (the ``relay_store`` fixture's)."""
    if _store is None:
        raise ConfigurationError(
            "no test store: use the relay_store fixture in this test, or pass the store's URL "
            "(runs_of(job, store=url))"
        )
    return _store


def runs_of(job: str, *, store: str | LeaseBackend | None = None) -> list[RunRecord]:
    """Every run the store recorded for ``job``, oldest slot first: each with its slot
    (``scheduled_for``), ``attempt``, ``state`` (the outcome) and ``reason``.

    ``store`` defaults to the current test's (:func:`current_store`).
    """
    with _opened(store) as backend:
        records = backend.runs(job, limit=_ALL_RUNS)
    return sorted(records, key=lambda record: (record.scheduled_for, record.id))


def settle(*, store: str | LeaseBackend | None = None, timeout: float = 30.0) -> None:
    """Wait, in real time, until no run of the store is leased: the runs a Celery or Dramatiq
    worker took have ended. Pass it as ``drive(beat.tick, settle=relay.testing.settle)``.

    Raises :class:`~relay.errors.ConfigurationError` after ``timeout`` seconds, naming the runs.
    """
    deadline = time.monotonic() + timeout
    with _opened(store) as backend:
        while True:
            busy = [r.id for r in backend.runs(limit=_ALL_RUNS) if r.state is RunState.RUNNING]
            if not busy:
                return
            if time.monotonic() >= deadline:
                raise ConfigurationError(
                    f"runs still leased after {timeout:g}s of real time: {', '.join(busy)}; "
                    "is a worker consuming them?"
                )
            time.sleep(0.01)


@contextmanager
def _opened(store: str | LeaseBackend | None) -> Iterator[LeaseBackend]:
    """The store to read: a backend passed in, or one opened from a URL and closed after."""
    if store is None:
        store = current_store()
    if not isinstance(store, str):
        yield store
        return
    backend = open_backend(store, read_only=True)  # reading creates nothing
    try:
        if not is_lease(backend):
            raise ConfigurationError(f"{store!r} is a claim store: it records no runs")
        yield backend
    finally:
        backend.close()
