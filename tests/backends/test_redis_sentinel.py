"""The Redis backends through Sentinel, against a real primary, replica and three sentinels.

One topology serves the module (each test its own key prefix): opening, reading read-only,
a primary killed (the next step reaches the new primary and loads the scripts it lacks), and a
primary demoted while the client is connected to it (``READONLY`` makes the client ask again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest
import redis

from relay.backends import open_backend
from relay.backends.redis_claim import RedisClaimBackend
from relay.backends.redis_lease import RedisLeaseBackend
from relay.contract import AcquireRequest, Outcome
from relay.errors import BackendUnavailable, StoreNotFound
from relay.runs import RunState
from tests.support.backends import unique
from tests.support.redis_sentinel import SentinelTopology, own_sentinel_topology

pytestmark = [pytest.mark.slow]
T = TypeVar("T")
SLOT = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    with own_sentinel_topology(tmp_path_factory.mktemp("sentinel")) as started:
        yield started


@pytest.fixture
def url(topology: SentinelTopology) -> str:
    return topology.url(query=f"prefix={unique()}:")


def request(minute: int, owner: str = "a") -> AcquireRequest:
    return AcquireRequest("job", SLOT + timedelta(minutes=minute), owner, lease=60)


def lease_backend(url: str, **options: Any) -> RedisLeaseBackend:
    backend = open_backend(url, **options)
    assert isinstance(backend, RedisLeaseBackend)
    return backend


def eventually(step: Callable[[], T], within: float = 30) -> tuple[T, int]:
    """``step()``'s value once the store answers it, and how many times it did not."""
    deadline, refused = time.monotonic() + within, 0
    while True:
        try:
            return step(), refused
        except BackendUnavailable:
            refused += 1
            assert time.monotonic() < deadline, "the store never answered again"
            time.sleep(0.1)


def replicated(topology: SentinelTopology) -> None:
    """Wait until the replica has every write the primary has (so a kill loses none)."""
    with redis.Redis(port=topology.primary().port) as client:
        assert client.wait(1, 10_000) == 1


def test_a_sentinel_url_opens_the_lease_backend_on_the_primary(url: str) -> None:
    backend = lease_backend(url)
    try:
        assert backend.name.startswith("Redis Sentinel (redis+sentinel://127.0.0.1:")
        won = backend.acquire(request(0))
        assert won.outcome is Outcome.WON and won.run is not None
        run = backend.start(won.run.id, won.run.token, "a", 60)
        assert backend.finish(run.id, run.token, succeeded=True) is RunState.SUCCEEDED
    finally:
        backend.close()
    reader = lease_backend(url, read_only=True)
    try:
        assert [(r.id, r.state) for r in reader.runs("job")] == [(run.id, RunState.SUCCEEDED)]
    finally:
        reader.close()


def _asking_sentinels(topology: SentinelTopology) -> int:
    """Connections open to the sentinels whose last command asked for the primary."""
    asked = 0
    for sentinel in topology.sentinels:
        with sentinel.client() as client:
            asked += sum(c["cmd"].startswith("sentinel|") for c in client.client_list())
    return asked


def test_closing_the_backend_closes_its_connections_to_the_sentinels(
    topology: SentinelTopology, url: str
) -> None:
    before = _asking_sentinels(topology)
    backend = lease_backend(url)
    assert backend.acquire(request(0)).outcome is Outcome.WON
    assert _asking_sentinels(topology) > before
    backend.close()
    assert _asking_sentinels(topology) <= before


def test_a_read_only_open_of_a_prefix_with_no_key_says_so(topology: SentinelTopology) -> None:
    with pytest.raises(StoreNotFound, match="no key with prefix"):
        open_backend(topology.url(query="prefix=nothing-here:"), read_only=True)


def test_after_a_primary_is_killed_the_next_steps_reach_the_new_one(
    topology: SentinelTopology, url: str
) -> None:
    backend = lease_backend(url)
    try:
        first = backend.acquire(request(0)).run
        assert first is not None
        replicated(topology)
        new = topology.replica()
        topology.fail_over()
        with redis.Redis(port=new.port) as client:
            client.script_flush()  # a promoted replica may lack the scripts: make sure it does
        # The run written before the failover is there; the scripts are loaded again.
        again, _ = eventually(lambda: backend.acquire(request(0, owner="b")))
        assert again.outcome is Outcome.HELD
        second, _ = eventually(lambda: backend.acquire(request(1)))
        assert second.run is not None and second.run.token > first.token
        assert backend.runs("job")[0].id == second.run.id
    finally:
        backend.close()


def test_the_claim_strategy_survives_a_failover(topology: SentinelTopology, url: str) -> None:
    backend = open_backend(url + "&strategy=script")
    other = open_backend(url + "&strategy=script")
    assert isinstance(backend, RedisClaimBackend) and isinstance(other, RedisClaimBackend)
    try:
        assert backend.claim("job", SLOT)
        replicated(topology)
        new = topology.replica()
        topology.fail_over()
        with redis.Redis(port=new.port) as client:
            client.script_flush()
        assert eventually(lambda: other.claim("job", SLOT))[0] is False
        assert eventually(lambda: other.claim("job", SLOT + timedelta(minutes=1)))[0] is True
    finally:
        backend.close()
        other.close()


def test_the_hosts_are_the_sentinels_not_the_data_nodes(topology: SentinelTopology) -> None:
    # A data node's address where a sentinel's belongs: it answers, but knows no service.
    data_node = f"redis+sentinel://127.0.0.1:{topology.primary().port}/relay/0"
    with pytest.raises(BackendUnavailable, match="lists the sentinels"):
        open_backend(data_node)
    # An unknown service name is said the same way.
    wrong = topology.url().replace("/relay/0", "/nosuchservice/0")
    with pytest.raises(BackendUnavailable, match="names the service they monitor"):
        open_backend(wrong)


# Last: the sentinels learn of the demoted node's link only at their next INFO, up to ~20 s.
def test_a_demoted_primary_makes_the_client_find_the_new_one(
    topology: SentinelTopology, url: str
) -> None:
    backend = lease_backend(url)
    try:
        assert backend.acquire(request(0)).outcome is Outcome.WON
        replicated(topology)
        old = topology.primary()
        topology.switch_over()  # the old primary runs on, a replica answering writes READONLY
        with redis.Redis(port=old.port) as client, pytest.raises(redis.ReadOnlyError):
            client.set(f"{backend.prefix}probe", 1)
        result, refused = eventually(lambda: backend.acquire(request(1)))
        assert result.outcome is Outcome.WON
        assert refused <= 1  # READONLY drops the connection; the retry asks the sentinels
        assert backend._redis.connection_pool.master_address[1] == topology.primary().port  # type: ignore[union-attr]
    finally:
        backend.close()
