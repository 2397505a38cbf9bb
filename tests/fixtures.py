"""Fixtures written once for the whole suite, loaded through ``pytest_plugins`` in conftest.py.

Each store's fixtures live here, named after what they give (``redis_lease_backend``, not a
module's own ``backend``), so no test module defines them again:

- ``lease_url`` / ``claim_url``: a fresh store, once per lease or claim backend;
- ``lease_backend`` / ``claim_backend``: the store of ``lease_url`` / ``claim_url``, opened,
  closed after the test;
- ``redis_lease_url`` / ``redis_lease_backend`` / ``redis_client``: a fresh Redis lease store and a
  plain client of the shared server, to look at its keys;
- ``fake_clock`` / ``clocked_store``: a :class:`~relay.testing.FakeClock` at ``T0`` and a SQLite
  lease store on it, for the deciding half (with the helper :func:`decider`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import redis

from relay import ClaimBackend, LeaseBackend, open_backend
from relay.backends.redis_lease import RedisLeaseBackend
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider
from relay.jobs import make_job
from relay.testing import FakeClock
from tests.support.backends import CLAIM_BACKENDS, LEASE_BACKENDS, params, redis_lease
from tests.support.services import SERVICES

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc).timestamp()
"""Where ``fake_clock`` starts: a fixed moment, so every run's id is known in advance."""


@pytest.fixture(params=params(LEASE_BACKENDS))
def lease_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to a fresh lease store, once per lease backend."""
    factory, _ = LEASE_BACKENDS[request.param]
    with factory(tmp_path) as url:
        yield url


@pytest.fixture(params=params(CLAIM_BACKENDS))
def claim_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to a fresh claim store, once per claim backend."""
    factory, _ = CLAIM_BACKENDS[request.param]
    with factory(tmp_path) as url:
        yield url


@pytest.fixture
def lease_backend(lease_url: str) -> Iterator[LeaseBackend]:
    """The lease store of ``lease_url``, opened; closed after the test."""
    opened = open_backend(lease_url)
    assert opened.capability == "lease"
    yield opened
    opened.close()


@pytest.fixture
def claim_backend(claim_url: str) -> Iterator[ClaimBackend]:
    """The claim store of ``claim_url``, opened; closed after the test."""
    opened = open_backend(claim_url)
    assert opened.capability == "claim"
    yield opened
    opened.close()


@pytest.fixture
def redis_lease_url(tmp_path: Path) -> Iterator[str]:
    """A URL to a fresh Redis lease store (a key prefix of its own)."""
    with redis_lease(tmp_path) as fresh:
        yield fresh


@pytest.fixture
def redis_lease_backend(redis_lease_url: str) -> Iterator[RedisLeaseBackend]:
    """The Redis lease store of ``redis_lease_url``, opened; closed after the test."""
    opened = open_backend(redis_lease_url)
    assert isinstance(opened, RedisLeaseBackend)
    yield opened
    opened.close()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A plain client of the shared Redis server, answering strings."""
    with redis.Redis.from_url(SERVICES["redis"].url, decode_responses=True) as plain:
        yield plain


@pytest.fixture
def fake_clock() -> FakeClock:
    """A fake clock standing at ``T0``, moved by the test."""
    return FakeClock(T0)


@pytest.fixture
def clocked_store(tmp_path: Path, fake_clock: FakeClock) -> Iterator[SQLiteLeaseBackend]:
    """A SQLite lease store whose clock is ``fake_clock``."""
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=fake_clock)
    yield backend
    backend.close()


def decider(store: Any, clock: FakeClock, owner: str = "a", **job: Any) -> Decider:
    """A decider of one job, ``job`` (every minute unless ``job`` says otherwise)."""
    made = Decider(store, owner=owner, lease=30, clock=clock)
    made.add(make_job(store, name="job", **{"every": 60, **job}))
    return made
