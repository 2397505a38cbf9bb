"""Three real instances, a job every second, and a Redis Sentinel topology failing over under them.

The primary is SIGKILLed while runs are in flight, Sentinel promotes the replica, the old primary
comes back as a replica; three times. Every slot's handler completes once, tokens never go back,
and the next run starts soon after each failover. The hazard is shown too (measured, printed,
not asserted): a replica that fell behind is promoted, and the runs it never received are lost
to the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.backends import unique
from tests.support.failover_race import race
from tests.support.redis_sentinel import own_sentinel_topology

pytestmark = [pytest.mark.slow]


def test_every_slot_runs_once_through_three_failovers(tmp_path: Path) -> None:
    with own_sentinel_topology(tmp_path / "topology") as topology:
        url = topology.url(query=f"prefix={unique()}:")
        result = race(url, tmp_path / "race", [lambda: topology.fail_over()[0]] * 3)
    print(result.summary())
    assert result.slots >= 15
    assert result.lost == []
    assert result.doubled == []
    assert result.tokens_back == []
    assert len(result.delays) == 3 and max(result.delays) < 30


def test_the_hazard_a_replica_that_was_behind_is_promoted(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    with own_sentinel_topology(tmp_path / "topology") as topology:
        url = topology.url(query=f"prefix={unique()}:")
        result = race(url, tmp_path / "race", [lambda: topology.fail_over(behind=3)[0]] * 2)
    print("hazard (no wait_replicas):", result.summary())
    record_property("hazard", result.summary())
