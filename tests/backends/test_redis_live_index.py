"""The Redis lease backend's index of live runs: a sweep reads only the runs it may lease.

``<prefix>live`` (score 0 for a pending run, its lease's expiry for a running one) is kept by the
scripts that change a run, in the same step; ``reclaimable()`` reads it instead of every job. What
a sweep touches is observed on the server with MONITOR, not timed.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
import redis

from relay import AcquireRequest, RunState, open_backend
from relay.backends.redis_lease import RedisLeaseBackend
from tests.support.services import SERVICES
from tests.support.waiting import lease_ran_out, wait_until

pytestmark = pytest.mark.redis
UTC = timezone.utc
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
LEASE = 3.0  # long enough to still hold at the next assertion on a loaded machine


def req(job: str, index: int = 0, lease: float = 30, **options: object) -> AcquireRequest:
    slot = BASE + timedelta(minutes=index)
    return AcquireRequest(job=job, slot=slot, owner="a", lease=lease, **options)  # type: ignore[arg-type]


def live(client: redis.Redis, backend: RedisLeaseBackend) -> dict[str, float]:
    """The index of live runs: run id -> score."""
    entries = client.zrange(f"{backend.prefix}live", 0, -1, withscores=True)
    return {_run_id(backend.prefix, key): score for key, score in entries}


def _run_id(prefix: str, key: str) -> str:
    tag, _, member = key[len(prefix) + 1 :].partition("}:run:")
    return f"{tag}@{member}"


@contextmanager
def jobs_touched(prefix: str) -> Iterator[set[str]]:
    """The jobs whose keys any command (scripts' included) named meanwhile, seen by MONITOR."""
    touched: set[str] = set()
    sentinel = f"end-of-watch-{secrets.token_hex(4)}"
    pattern = re.compile(re.escape(prefix) + r"\{([^}]*)\}")
    watcher = redis.Redis.from_url(SERVICES["redis"].url, decode_responses=True)
    with watcher.monitor() as monitor:

        def read() -> None:
            while True:
                command = monitor.next_command()["command"]
                if sentinel in command:
                    return
                touched.update(pattern.findall(command))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        yield touched
        watcher.echo(sentinel)
        reader.join(timeout=30)
        assert not reader.is_alive(), "MONITOR never showed the end of the watch"
    watcher.close()


def idle_store(backend: RedisLeaseBackend, jobs: int) -> None:
    """``jobs`` jobs with one finished run each: nothing to reclaim."""
    results = backend.acquire_many([req(f"done-{n}") for n in range(jobs)])
    for result in results:
        assert result.run is not None
        backend.finish(result.run.id, result.run.token, succeeded=True)


def two_live_runs(backend: RedisLeaseBackend) -> tuple[str, str]:
    """A handed-over run (pending) and one whose lease runs out in ``LEASE`` s; their ids."""
    released = backend.acquire(req("released")).run
    expiring = backend.acquire(req("expiring", lease=LEASE)).run
    assert released is not None and expiring is not None
    backend.release(released.id, released.token)
    return released.id, expiring.id


def test_a_sweep_reads_only_the_jobs_of_live_runs(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    idle_store(redis_lease_backend, 1000)
    released, expiring = two_live_runs(redis_lease_backend)
    # the expiring one still holds:
    assert [r.id for r in redis_lease_backend.reclaimable()] == [released]
    lease_ran_out(redis_lease_backend, expiring)
    with jobs_touched(redis_lease_backend.prefix) as touched:
        found = redis_lease_backend.reclaimable()
    assert sorted(r.id for r in found) == sorted([released, expiring])
    assert touched == {"released", "expiring"}  # not one of the 1,000 finished jobs
    with jobs_touched(redis_lease_backend.prefix) as touched:
        retried, exhausted = redis_lease_backend.acquire_many([req("released"), req("expiring")])
        assert retried.run is not None and exhausted.outcome.value == "exhausted"
        redis_lease_backend.finish(retried.run.id, retried.run.token, succeeded=True)
        assert redis_lease_backend.reclaimable() == []
    assert touched == {"released", "expiring"}
    assert live(redis_client, redis_lease_backend) == {}


def test_the_index_follows_every_step(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    # a store with no job: the index is built at once
    assert redis_lease_backend.reclaimable() == []
    assert redis_client.get(f"{redis_lease_backend.prefix}live:version") == "1"
    run = redis_lease_backend.acquire(req("job", max_attempts=2)).run
    assert run is not None
    (record,) = redis_lease_backend.runs("job")
    assert record.expires_at is not None
    assert live(redis_client, redis_lease_backend) == {run.id: record.expires_at.timestamp() * 1000}
    redis_lease_backend.heartbeat(run.id, run.token, 600)
    assert (
        live(redis_client, redis_lease_backend)[run.id]
        > record.expires_at.timestamp() * 1000 + 500_000
    )
    assert redis_lease_backend.finish(run.id, run.token, succeeded=False) is RunState.PENDING
    assert live(redis_client, redis_lease_backend) == {run.id: 0}  # a retry waits
    again = redis_lease_backend.acquire(req("job", max_attempts=2)).run
    assert again is not None
    redis_lease_backend.start(again.id, again.token, "a", 60)
    assert live(redis_client, redis_lease_backend)[run.id] > 0
    redis_lease_backend.release(again.id, again.token)
    assert live(redis_client, redis_lease_backend) == {run.id: 0}
    last = redis_lease_backend.acquire(req("job")).run
    assert last is not None
    assert redis_lease_backend.finish(last.id, last.token, succeeded=True) is RunState.SUCCEEDED
    assert live(redis_client, redis_lease_backend) == {}
    manual = redis_lease_backend.trigger("job")
    redis_lease_backend.backfill("job", [BASE - timedelta(hours=1)])
    assert set(live(redis_client, redis_lease_backend)) == {
        manual.id,
        "job@" + _slot(BASE - timedelta(hours=1)),
    }
    assert set(live(redis_client, redis_lease_backend).values()) == {0}


def test_an_exhausted_or_paused_and_resumed_run_leaves_and_joins_the_index(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    run = redis_lease_backend.acquire(req("job", lease=0.1)).run
    assert run is not None
    # the runner died: its lease ran out, and it had its one attempt
    wait_until(
        lambda: [r.id for r in redis_lease_backend.reclaimable()] == [run.id], "the lease runs out"
    )
    assert redis_lease_backend.acquire(req("job")).outcome.value == "exhausted"
    assert live(redis_client, redis_lease_backend) == {}
    redis_lease_backend.pause("job", "maintenance", "me")
    redis_lease_backend.acquire(req("job", index=1))  # skipped: paused
    assert live(redis_client, redis_lease_backend) == {}
    (resumed,) = redis_lease_backend.resume("job", catch_up=3600 * 24)
    assert live(redis_client, redis_lease_backend) == {resumed: 0}


def test_a_stale_index_entry_is_dropped_by_the_next_sweep(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    released, _ = two_live_runs(redis_lease_backend)
    redis_lease_backend.reclaimable()  # builds the index
    ghost = f"{redis_lease_backend.prefix}{{ghost}}:run:{_slot(BASE)}"  # a run whose record is gone
    redis_client.zadd(f"{redis_lease_backend.prefix}live", {ghost: 0})
    assert [r.id for r in redis_lease_backend.reclaimable()] == [released]
    assert set(live(redis_client, redis_lease_backend)) == {released, "expiring@" + _slot(BASE)}


def test_a_store_written_before_the_index_is_read_in_full_once(
    redis_lease_url: str, redis_client: redis.Redis
) -> None:
    old = open_backend(redis_lease_url)
    assert isinstance(old, RedisLeaseBackend)
    idle_store(old, 50)
    released, expiring = two_live_runs(old)
    # What a store written by an earlier version holds: no index, no version key.
    redis_client.delete(f"{old.prefix}live", f"{old.prefix}live:version")
    old.close()
    reader = open_backend(redis_lease_url, read_only=True)
    assert [r.id for r in reader.reclaimable()] == [released]  # reads every job, writes nothing
    assert not redis_client.exists(f"{reader.prefix}live", f"{reader.prefix}live:version")
    reader.close()
    upgraded = open_backend(redis_lease_url)
    assert isinstance(upgraded, RedisLeaseBackend)
    with jobs_touched(upgraded.prefix) as touched:
        assert [r.id for r in upgraded.reclaimable()] == [released]
    assert len(touched) == 52  # every job, once
    assert redis_client.get(f"{upgraded.prefix}live:version") == "1"
    assert set(live(redis_client, upgraded)) == {released, expiring}  # the one still held too
    lease_ran_out(upgraded, expiring)  # the run held across the upgrade: the index has it
    with jobs_touched(upgraded.prefix) as touched:
        found = upgraded.reclaimable()
    assert sorted(r.id for r in found) == sorted([released, expiring])
    assert touched == {"released", "expiring"}
    upgraded.close()


def test_a_store_that_lost_its_keys_is_read_in_full_again(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    two_live_runs(redis_lease_backend)
    redis_lease_backend.reclaimable()
    # a restart without persistence:
    redis_client.delete(*redis_client.scan_iter(match=f"{redis_lease_backend.prefix}*"))
    run = redis_lease_backend.acquire(req("again")).run
    assert run is not None
    redis_lease_backend.release(run.id, run.token)
    assert [r.id for r in redis_lease_backend.reclaimable()] == [run.id]
    assert redis_client.get(f"{redis_lease_backend.prefix}live:version") == "1"
    with jobs_touched(redis_lease_backend.prefix) as touched:
        assert [r.id for r in redis_lease_backend.reclaimable()] == [run.id]
    assert touched == {"again"}


def _slot(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"
