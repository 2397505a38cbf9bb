"""The Redis lease backend's key lifetimes when its scripts read no TTL: a heartbeat renews a
running run's record (and its job's active runs) from the record's ``kept_ms``, and finishes
trim the indexes of records that expired, a few at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from relay import AcquireRequest, open_backend
from relay.backends.redis_lease import RedisLeaseBackend
from tests.support.backends import redis_lease
from tests.support.services import SERVICES

pytestmark = pytest.mark.redis
UTC = timezone.utc
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[RedisLeaseBackend]:
    with redis_lease(tmp_path) as url:
        opened = open_backend(url + "&retention=1")
        assert isinstance(opened, RedisLeaseBackend)
        yield opened
        opened.close()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    with redis.Redis.from_url(SERVICES["redis"].url, decode_responses=True) as plain:
        yield plain


def keys(backend: RedisLeaseBackend, member: str) -> tuple[str, str]:
    """The run's record key and its job's active index key."""
    base = f"{backend.prefix}{{job}}:"
    return f"{base}run:{member}", f"{base}active"


def test_a_heartbeat_renews_the_record_and_the_active_runs_only_when_they_run_low(
    backend: RedisLeaseBackend, client: redis.Redis
) -> None:
    # retention 1 s + lease 2 s: the keys live 3 s, and are renewed once under 1.5 s are left.
    run = backend.acquire(AcquireRequest("job", BASE, "a", lease=2)).run
    assert run is not None
    record, active = keys(backend, run.id.split("@", 1)[1])
    time.sleep(0.5)
    backend.heartbeat(run.id, run.token, 2)  # 2.5 s left: nothing renewed
    assert client.pttl(record) <= 2600 and client.pttl(active) <= 2600
    time.sleep(1.4)  # under 1.5 s left (a loaded machine only leaves less, and 3 s would do)
    backend.heartbeat(run.id, run.token, 2)
    assert client.pttl(record) > 2000 and client.pttl(active) > 2000
    # A record written before kept_ms existed learns it from its TTL at its first heartbeat.
    client.hdel(record, "kept_ms")
    backend.heartbeat(run.id, run.token, 2)
    seconds, micros = client.time()
    expiry = seconds * 1000 + micros // 1000 + client.pttl(record)
    assert abs(int(client.hget(record, "kept_ms") or 0) - expiry) < 100
    assert backend.runs()[0].state.value == "running"


def test_a_start_renews_from_kept_ms_as_a_heartbeat_does(
    backend: RedisLeaseBackend, client: redis.Redis
) -> None:
    run = backend.acquire(AcquireRequest("job", BASE, "a", lease=2)).run
    assert run is not None
    record, active = keys(backend, run.id.split("@", 1)[1])
    time.sleep(1.7)
    backend.start(run.id, run.token, "a", 2)
    assert client.pttl(record) > 2000 and client.pttl(active) > 2000


def test_a_heartbeat_never_shortens_the_active_runs_of_a_longer_lease(
    backend: RedisLeaseBackend, client: redis.Redis
) -> None:
    long = backend.acquire(AcquireRequest("job", BASE, "a", lease=600)).run
    short = backend.acquire(AcquireRequest("job", BASE + timedelta(minutes=1), "a", lease=2)).run
    assert long is not None and short is not None
    record, active = keys(backend, short.id.split("@", 1)[1])
    client.hdel(record, "kept_ms")  # the short run's next heartbeat renews
    backend.heartbeat(short.id, short.token, 2)
    assert client.pttl(active) > 590_000


def test_finishes_trim_the_indexes_of_expired_records(
    backend: RedisLeaseBackend, client: redis.Redis
) -> None:
    # Lease 30 s: the job's indexes live 31 s; a finished record lives 1 s (the retention).
    for i in range(6):
        run = backend.acquire(AcquireRequest("job", BASE + timedelta(seconds=i), "a", 30)).run
        assert run is not None
        backend.finish(run.id, run.token, succeeded=True)
    slots = f"{backend.prefix}{{job}}:slots"
    time.sleep(1.5)  # the six records expire (retention 1 s)
    assert client.zcard(slots) == 6
    # One finish in four trims, eight at most: 60 finishes miss it with a chance of 3e-8.
    for i in range(60):
        at = BASE + timedelta(hours=1, seconds=i)
        run = backend.acquire(AcquireRequest("job", at, "a", 30)).run
        assert run is not None
        backend.finish(run.id, run.token, succeeded=True)
    old = client.zrangebyscore(
        slots, "-inf", int((BASE + timedelta(seconds=10)).timestamp() * 1000)
    )
    assert old == []
