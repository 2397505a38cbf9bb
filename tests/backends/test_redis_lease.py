"""The Redis lease backend beyond the contract: URLs, errors, keys, round trips, retention."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from relay import AcquireRequest, Outcome, RunState, open_backend
from relay.backends.redis_lease import RedisLeaseBackend
from relay.errors import BackendUnavailable, ConfigurationError, RelayError
from tests.support.redis_server import own_redis
from tests.support.services import SERVICES

pytestmark = pytest.mark.redis
UTC = timezone.utc


# Fixed once, so that every call in a test names the same runs, whatever minute it is.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def slot(index: int) -> datetime:
    return BASE + timedelta(minutes=index)


def req(job: str = "job", index: int = 0, owner: str = "a", **options: object) -> AcquireRequest:
    return AcquireRequest(job=job, slot=slot(index), owner=owner, lease=30, **options)  # type: ignore[arg-type]


def keys_of(client: redis.Redis, backend: RedisLeaseBackend) -> list[str]:
    return sorted(client.scan_iter(match=f"{backend.prefix}*", count=1000))


# -- URLs ---------------------------------------------------------------------------------------


def test_valkey_scheme_and_prefix_option(redis_lease_url: str, redis_client: redis.Redis) -> None:
    backend = open_backend(redis_lease_url.replace("redis://", "valkey://", 1))
    assert isinstance(backend, RedisLeaseBackend) and backend.prefix.startswith("relay_t_")
    assert backend.acquire(req()).outcome is Outcome.WON
    assert all(key.startswith(backend.prefix) for key in keys_of(redis_client, backend))
    assert keys_of(redis_client, backend)
    backend.close()


def test_default_prefix_and_name_hide_the_password() -> None:
    base = SERVICES["redis"].url
    backend = open_backend(base)
    assert isinstance(backend, RedisLeaseBackend) and backend.prefix == "relay:"
    backend.close()
    try:
        named = RedisLeaseBackend.from_url(base.replace("redis://", "redis://:secret@", 1))
    except BackendUnavailable as exc:  # redis-py 6 refuses AUTH to a server with no password
        shown = str(exc)
    else:
        shown = named.name
        named.close()
    assert "secret" not in shown and "***" in shown


@pytest.mark.parametrize(
    ("suffix", "words"),
    [
        ("?colour=blue", "colour"),
        ("?retention=-1", "retention"),
        ("?prefix=a{b}", "braces"),
        ("?strategy=nonsense", "unknown strategy"),
        ("?cluster=maybe", "yes or no"),
    ],
)
def test_bad_options_are_refused_with_the_fix(suffix: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        open_backend("redis://127.0.0.1:6379/0" + suffix)


@pytest.mark.parametrize(
    "bad_url", ["redis://127.0.0.1:notaport/0", "redis://127.0.0.1:6379/zero", "redis:/nohost"]
)
def test_malformed_url_is_a_configuration_error(bad_url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"redis://"):
        open_backend(bad_url)


def test_unreachable_host_says_what_to_check() -> None:
    with own_redis(Path("/tmp")) as server:
        port = server.port
    with pytest.raises(BackendUnavailable, match="host and port") as caught:
        open_backend(f"redis://127.0.0.1:{port}/0?socket_connect_timeout=2")
    assert isinstance(caught.value, RelayError)


def test_wrong_password_says_to_check_it(tmp_path: Path) -> None:
    with own_redis(tmp_path, "--requirepass", "right-one") as server:
        with pytest.raises(BackendUnavailable, match="password") as caught:
            open_backend(server.url.replace("redis://", "redis://:wrong-one@", 1))
        assert "wrong-one" not in str(caught.value)
        with pytest.raises(BackendUnavailable, match="password"):
            open_backend(server.url)
        backend = open_backend(server.url.replace("redis://", "redis://:right-one@", 1))
        assert backend.acquire(req()).outcome is Outcome.WON  # type: ignore[union-attr]
        backend.close()


def test_missing_database_says_what_to_check() -> None:
    with pytest.raises(BackendUnavailable, match="database number"):
        open_backend(SERVICES["redis"].url.rsplit("/", 1)[0] + "/999")


# -- keys, Cluster slots ------------------------------------------------------------------------


def test_each_jobs_keys_share_one_cluster_slot(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    jobs = ["plain", "with{braces}", "{", "}x{", "per%cent"]
    for job in jobs:
        run = redis_lease_backend.acquire(req(job)).run
        assert run is not None
        redis_lease_backend.finish(run.id, run.token, succeeded=False)
        redis_lease_backend.skip(job, slot(1), "missed")
    per_job: dict[int, set[str]] = {}
    for key in keys_of(redis_client, redis_lease_backend):
        if key not in {f"{redis_lease_backend.prefix}{k}" for k in ("jobs", "layout")}:
            per_job.setdefault(key_slot(key.encode()), set()).add(key.split("}:")[0])
    assert len(per_job) == len(jobs)  # one slot per job, and no job shares another's
    assert all(len(tags) == 1 for tags in per_job.values())
    assert {r.job for r in redis_lease_backend.runs()} == set(jobs)


# -- round trips --------------------------------------------------------------------------------


class _Counter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sends = 0
        original = redis.connection.AbstractConnection.send_packed_command

        def counting(conn: object, *args: object, **kwargs: object) -> object:
            self.sends += 1
            return original(conn, *args, **kwargs)  # type: ignore[arg-type,no-untyped-call]

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)


def test_batched_acquire_is_one_round_trip(
    redis_lease_backend: RedisLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = _Counter(monkeypatch)
    requests = [req(f"job-{j}", i) for j in range(20) for i in range(5)]
    results = redis_lease_backend.acquire_many(requests)
    assert counter.sends == 1
    assert [r.outcome for r in results] == [Outcome.WON] * 100
    again = redis_lease_backend.acquire_many(requests)
    assert {r.outcome for r in again} == {Outcome.HELD}
    assert counter.sends == 2


def test_one_job_per_script_call_is_still_one_round_trip(
    redis_lease_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RedisLeaseBackend.from_url(redis_lease_url, jobs_per_call=1)  # as on Redis Cluster
    requests = [req(f"job-{j}", i) for i in range(3) for j in range(7)]
    counter = _Counter(monkeypatch)
    results = backend.acquire_many([*requests, req("job-0", 0)])
    assert counter.sends == 1
    assert [r.outcome for r in results] == [Outcome.WON] * 21 + [Outcome.HELD]
    assert results[0].run is not None and results[0].run.id == f"job-0@{slot(0):%Y-%m-%dT%H:%M:%SZ}"
    backend.close()


def test_a_batch_of_several_owners_gives_each_its_own_runs(
    redis_lease_backend: RedisLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = _Counter(monkeypatch)
    requests = [
        req(f"job-{j}", i, owner=f"owner-{(j + i) % 3}") for j in range(60) for i in range(2)
    ]
    results = redis_lease_backend.acquire_many(requests)
    assert counter.sends == 1
    for request, result in zip(requests, results, strict=True):
        assert result.run is not None
        assert (result.run.job, result.run.owner) == (request.job, request.owner)
        assert result.run.scheduled_for == request.slot
    runs = {record.id: record.owner for record in redis_lease_backend.runs(limit=500)}
    assert runs == {r.run.id: r.run.owner for r in results if r.run is not None}


def test_acquire_and_finish_take_two_round_trips(
    redis_lease_backend: RedisLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis_lease_backend.acquire(req(index=9))  # the scripts are loaded at open; this warms the pool
    counter = _Counter(monkeypatch)
    run = redis_lease_backend.acquire(req()).run
    assert run is not None
    assert redis_lease_backend.finish(run.id, run.token, succeeded=True) is RunState.SUCCEEDED
    assert counter.sends == 2


def test_forgotten_scripts_are_loaded_again(redis_lease_backend: RedisLeaseBackend) -> None:
    # A restart makes the server forget the scripts; a hash it never saw does the same without
    # flushing everyone's scripts from the shared server.
    script = redis_lease_backend._scripts["acquire"]
    real = script.sha
    script.sha = "0" * 40
    results = redis_lease_backend.acquire_many([req(), req(index=1), req("other")])
    assert [r.outcome for r in results] == [Outcome.WON] * 3
    assert script.sha == real
    assert redis_lease_backend.acquire(req(index=2)).outcome is Outcome.WON


# -- the server's clock, tokens -----------------------------------------------------------------


def test_expiry_is_written_on_the_servers_clock(redis_lease_backend: RedisLeaseBackend) -> None:
    run = redis_lease_backend.acquire(AcquireRequest("job", slot(0), "a", lease=120)).run
    assert run is not None
    (record,) = redis_lease_backend.runs("job")
    assert record.expires_at is not None
    assert abs((record.expires_at - redis_lease_backend.now()).total_seconds() - 120) < 5


def test_tokens_keep_growing_when_the_counter_is_lost(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    first = redis_lease_backend.acquire(req(index=0)).run
    assert first is not None
    # what a restart without persistence does:
    redis_client.delete(*keys_of(redis_client, redis_lease_backend))
    second = redis_lease_backend.acquire(req(index=0)).run
    assert second is not None and second.token > first.token
    third = redis_lease_backend.acquire(req(index=1)).run
    assert third is not None and third.token > second.token


def test_tokens_grow_within_one_batch_of_one_job(redis_lease_backend: RedisLeaseBackend) -> None:
    results = redis_lease_backend.acquire_many([req(index=i) for i in range(50)])
    tokens = [r.run.token for r in results if r.run is not None]
    assert len(tokens) == 50 and tokens == sorted(set(tokens))


# -- retention ----------------------------------------------------------------------------------


def test_records_expire_after_retention_and_leave_the_indexes(
    redis_lease_url: str, redis_client: redis.Redis
) -> None:
    backend = open_backend(redis_lease_url + "&retention=1")
    assert isinstance(backend, RedisLeaseBackend)
    run = backend.acquire(req()).run
    assert run is not None
    backend.finish(run.id, run.token, succeeded=True)
    backend.skip("job", slot(1), "missed")
    (run_key,) = [k for k in keys_of(redis_client, backend) if k.endswith(":run:" + run.id[4:])]
    assert 0 < redis_client.pttl(run_key) <= 1000
    time.sleep(1.5)
    assert backend.runs() == [] and backend.last_slot("job") is None
    leftovers = set(keys_of(redis_client, backend)) - {
        f"{backend.prefix}{k}" for k in ("jobs", "layout")
    }
    assert not any(":run:" in key for key in leftovers)
    assert all(redis_client.zcard(key) == 0 for key in leftovers if not key.endswith(":token"))
    backend.close()


def test_prune_forgets_a_job_whose_keys_all_expired(
    redis_lease_url: str, redis_client: redis.Redis
) -> None:
    backend = open_backend(redis_lease_url + "&retention=1")
    assert isinstance(backend, RedisLeaseBackend)
    try:
        for job in ("gone", "kept"):
            run = backend.acquire(AcquireRequest(job, slot(0), "a", lease=0.5)).run
            assert run is not None
            backend.finish(run.id, run.token, succeeded=True)
        backend.register_jobs({"kept": "{}"})  # a registered job keeps its name
        jobs_key = f"{backend.prefix}jobs"
        assert redis_client.smembers(jobs_key) == {"gone", "kept"}
        time.sleep(2.0)  # records, token and indexes expire: 1 s retention + 0.5 s lease
        assert backend.prune(3600) == 0
        assert redis_client.smembers(jobs_key) == {"kept"}
        run = backend.acquire(AcquireRequest("gone", slot(1), "a", lease=30)).run
        assert run is not None  # the job comes back, and is listed again
        assert redis_client.smembers(jobs_key) == {"gone", "kept"}
    finally:
        backend.close()


def test_running_records_live_as_long_as_their_lease(
    redis_lease_backend: RedisLeaseBackend, redis_client: redis.Redis
) -> None:
    redis_lease_backend.acquire(AcquireRequest("job", slot(0), "a", lease=3600))
    prefix = redis_lease_backend.prefix
    store_wide = {f"{prefix}jobs", f"{prefix}live", f"{prefix}layout"}  # indexes, the layout
    for key in keys_of(redis_client, redis_lease_backend):
        if key not in store_wide:
            assert redis_client.pttl(key) > (7 * 24 + 1) * 3600 * 1000 - 60_000, key


def test_pending_runs_are_reclaimable_and_not_live(redis_lease_backend: RedisLeaseBackend) -> None:
    run = redis_lease_backend.acquire(req(max_attempts=3)).run
    assert run is not None
    redis_lease_backend.release(run.id, run.token)
    assert [r.id for r in redis_lease_backend.reclaimable()] == [run.id]
    assert redis_lease_backend.acquire(req(index=1, overlap_skip=True)).outcome is Outcome.WON
    assert [r.id for r in redis_lease_backend.reclaimable(limit=1)] == [run.id]
