"""The whole lease contract suite again, through Redis Sentinel with ``wait_replicas=1``.

The contract's tests are imported here; this module's ``lease_url`` fixture replaces the usual one,
so each test gets a fresh key prefix on a primary, a replica and three sentinels started once for
the module, and every step that changes a run waits for the replica.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.contract.test_lease_contract import *  # noqa: F403
from tests.support.backends import unique
from tests.support.redis_sentinel import SentinelTopology, own_sentinel_topology

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    with own_sentinel_topology(tmp_path_factory.mktemp("sentinel")) as started:
        yield started


@pytest.fixture
def lease_url(topology: SentinelTopology) -> Iterator[str]:
    prefix = f"{unique()}:"
    yield topology.url(query=f"prefix={prefix}&wait_replicas=1")
    with redis.Redis(port=topology.primary().port) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
