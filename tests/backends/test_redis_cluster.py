"""The whole lease contract suite again, on a Redis Cluster of three primaries (``?cluster=yes``).

The contract's tests are imported here; this module's ``lease_url`` fixture replaces the usual one,
so each test gets a fresh key prefix on a cluster started once for the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.cluster

from relay import AcquireRequest, LeaseLost, Outcome, open_backend
from relay.backends.redis_lease import RedisLeaseBackend
from tests.contract.test_heartbeat_many_contract import *  # noqa: F403
from tests.contract.test_lease_contract import *  # noqa: F403
from tests.contract.test_lease_contract import slot
from tests.support.redis_server import cluster_lease_url, own_redis_cluster

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with own_redis_cluster(tmp_path_factory.mktemp("cluster")) as url:
        yield url


@pytest.fixture
def lease_url(cluster_url: str) -> Iterator[str]:
    with cluster_lease_url(cluster_url) as url:
        yield url


def test_jobs_land_on_every_node_and_one_tick_decides_them(lease_url: str, tmp_path: Path) -> None:
    backend = open_backend(lease_url)
    assert isinstance(backend, RedisLeaseBackend) and backend.jobs_per_call == 1
    assert backend.name.startswith("Redis Cluster")
    requests = [AcquireRequest(f"job-{n}", slot(0), "a", 30) for n in range(30)]
    assert {r.outcome for r in backend.acquire_many(requests)} == {Outcome.WON}
    assert {r.outcome for r in backend.acquire_many(requests)} == {Outcome.HELD}
    assert len(backend.runs(limit=100)) == 30
    client = redis.cluster.RedisCluster.from_url(lease_url.split("?")[0])
    primaries = client.get_primaries()  # type: ignore[no-untyped-call]
    holding = [node for node in primaries if client.dbsize(target_nodes=node) > 0]
    assert len(holding) == 3  # the jobs' keys are spread over the three primaries
    client.close()
    backend.close()


def test_a_cluster_keeps_no_index_of_live_runs_and_sweeps_every_job(lease_url: str) -> None:
    # <prefix>live would sit in another slot than a job's keys, which one script cannot touch.
    backend = open_backend(lease_url)
    assert isinstance(backend, RedisLeaseBackend)
    runs = [backend.acquire(AcquireRequest(f"job-{n}", slot(0), "a", 30)).run for n in range(5)]
    assert all(run is not None for run in runs)
    backend.release(runs[0].id, runs[0].token)  # type: ignore[union-attr]
    assert [r.id for r in backend.reclaimable()] == [runs[0].id]  # type: ignore[union-attr]
    client = redis.cluster.RedisCluster.from_url(lease_url.split("?")[0])
    assert not client.exists(f"{backend.prefix}live", f"{backend.prefix}live:version")
    client.close()
    backend.close()


def test_one_heartbeat_many_renews_runs_on_every_node(lease_url: str) -> None:
    backend = open_backend(lease_url)
    assert isinstance(backend, RedisLeaseBackend)
    runs = [backend.acquire(AcquireRequest(f"job-{n}", slot(0), "a", 30)).run for n in range(12)]
    held = [(run.id, run.token) for run in runs if run is not None]
    assert len(held) == 12
    backend.release(*held[5])
    assert backend.acquire(AcquireRequest("job-5", slot(0), "b", 30)).outcome is Outcome.WON
    lost = backend.heartbeat_many(held, 60)  # one pipeline, split by node
    assert [n for n, why in enumerate(lost) if why is not None] == [5]
    assert isinstance(lost[5], LeaseLost)
    client = redis.cluster.RedisCluster.from_url(lease_url.split("?")[0])
    primaries = client.get_primaries()  # type: ignore[no-untyped-call]
    assert all(client.dbsize(target_nodes=node) > 0 for node in primaries)  # spread over all
    client.close()
    backend.close()
