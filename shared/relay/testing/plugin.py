"""Relay's pytest plugin (entry point ``pytest11``; the ``[testing]`` extra installs pytest).

Fixtures: ``relay_clock_start`` (override it to start elsewhere), ``relay_clock``, ``relay_store``
and ``relay_scheduler``; see :mod:`relay.testing`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from relay.scheduler import Scheduler
from relay.testing import DEFAULT_START, FakeClock, use_store

__all__ = ["relay_clock", "relay_clock_start", "relay_scheduler", "relay_store"]


@pytest.fixture
def relay_clock_start() -> datetime:
    """Where the test's fake clock starts: 2026-01-01 00:00 UTC. Override it to start elsewhere
    (an aware datetime), in a test module or a conftest."""
    return DEFAULT_START


@pytest.fixture
def relay_clock(relay_clock_start: datetime, tmp_path: Path) -> Iterator[FakeClock]:
    """A :class:`~relay.testing.FakeClock` that Relay reads in this process for the test:
    the engine, the schedulers, Celery beat and the SQLite store.

    Its ``test_store`` is the test's fresh store (``relay_store``'s URL): a scheduler it drives
    that was opened on another store without this clock (an application's own
    ``relay.Scheduler(url)``) is moved onto it, so a test run twice runs its jobs twice."""
    clock = FakeClock(relay_clock_start)
    clock.test_store = f"sqlite:///{tmp_path / 'relay-test.db'}?durability=fast"
    with clock.installed():
        yield clock


@pytest.fixture
def relay_store(relay_clock: FakeClock) -> Iterator[str]:
    """The URL of a fresh SQLite lease store for the test, on its fake clock.

    It commits without waiting for the disk (``durability=fast``): a test's store need not
    survive a power cut. :func:`relay.testing.runs_of` reads it by default.
    """
    url = relay_clock.test_store
    assert url is not None
    use_store(url)
    try:
        yield url
    finally:
        use_store(None)


@pytest.fixture
def relay_scheduler(relay_clock: FakeClock, relay_store: str) -> Iterator[Scheduler[Any]]:
    """A :class:`relay.Scheduler` on ``relay_store`` (default lease and heartbeat), driven by
    ``relay_clock``: add jobs with ``@relay_scheduler.job(...)``, then ``relay_clock.advance``."""
    scheduler: Scheduler[Any] = Scheduler(relay_store, owner="relay-test", clock=relay_clock)
    relay_clock.drive(scheduler)
    try:
        yield scheduler
    finally:
        scheduler.backend.close()
