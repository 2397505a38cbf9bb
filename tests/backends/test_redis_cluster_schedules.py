"""Stored schedules on a Redis Cluster of three primaries (``?cluster=yes``): the schedule
contract suite again, and every schedule key in one slot (the hash tag ``{relay:schedules}``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.cluster

from relay import Control
from tests.contract.test_schedule_contract import (  # noqa: F401
    backend,
    control,
    test_a_change_that_changes_nothing_makes_no_version,
    test_a_refused_change_leaves_the_revision_alone,
    test_a_second_add_of_a_name_conflicts_and_writes_nothing,
    test_add_reads_back_at_version_1_stamped_by_the_store,
    test_history_records_each_change_with_what_changed,
    test_racing_processes_make_one_change,
    test_remove_keeps_history_and_a_new_add_continues_the_versions,
    test_the_revision_feed_returns_each_change_once_in_order,
    test_the_task_must_be_allowed_by_a_live_instance,
    test_update_compares_versions_and_names_the_current_one,
)
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


def test_every_schedule_key_shares_one_slot(lease_url: str, tmp_path: Path) -> None:
    with Control(lease_url) as writer:
        for n in range(20):
            writer.add_schedule(f"s{n}", "t", every=60, force=True)
        writer.update_schedule("s3", version=1, every=30)
    prefix = lease_url.split("prefix=")[1]
    client = redis.cluster.RedisCluster.from_url(lease_url.split("?")[0])
    keys = set(client.scan_iter(match=f"{prefix}*", count=1000, target_nodes="primaries"))
    # A writable open records the prefix's layout (relay.layout): one key, read and written alone,
    # so it may sit in a slot of its own; every other key is a stored schedule's.
    layout = f"{prefix}layout".encode()
    assert layout in keys
    keys.remove(layout)
    assert len(keys) >= 20 + 3  # a history per schedule, the rows, the feed, the revision
    assert len({client.keyslot(key) for key in keys}) == 1
    client.close()
