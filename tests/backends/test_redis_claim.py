"""The Redis claim backend: one winner per run with each strategy, bounded memory, clear errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from relay import BackendUnavailable, ConfigurationError, open_backend
from relay.backends.redis_claim import STREAM_KEEP, RedisClaimBackend
from tests.backends.claim_slots import slots
from tests.support.claim_backends import REDIS86_ENV, redis_claim
from tests.support.redis_server import own_redis
from tests.support.services import SERVICES

pytestmark = pytest.mark.redis

STRATEGIES = ["stream-id", "script"]


@pytest.fixture(params=STRATEGIES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with redis_claim(request.param)(tmp_path) as url:
        yield url


@pytest.fixture
def backend(url: str) -> Iterator[RedisClaimBackend]:
    opened = open_backend(url)
    assert isinstance(opened, RedisClaimBackend)
    yield opened
    opened.close()


def test_a_run_is_won_once_and_asking_again_loses(backend: RedisClaimBackend, url: str) -> None:
    slot = slots(1)[0]
    other: Any = open_backend(url)
    try:
        assert backend.claim("job", slot) is True
        assert backend.claim("job", slot) is False
        assert other.claim("job", slot) is False
        assert other.claim("other-job", slot) is True
    finally:
        other.close()


def test_claim_many_answers_in_order(backend: RedisClaimBackend) -> None:
    first, second, third = slots(3)
    assert backend.claim("a", second)
    # A batch out of slot order still wins its own runs (the stream-id strategy sorts it).
    assert backend.claim_many([("a", third), ("b", first), ("a", second), ("b", second)]) == [
        True,
        True,
        False,
        True,
    ]
    assert backend.claim_many([]) == []


def test_stream_id_loses_an_older_slot_after_a_newer_one(tmp_path: Path) -> None:
    with redis_claim("stream-id")(tmp_path) as url:
        backend: Any = open_backend(url)
        older, newer = slots(2)
        try:
            assert backend.claim("job", newer)
            # Nobody claimed `older`, yet it cannot be won now: a lost run, never a second winner.
            assert backend.claim("job", older) is False
            assert backend.remembers_for is None
        finally:
            backend.close()


def test_stream_id_stream_stays_short(tmp_path: Path) -> None:
    with redis_claim("stream-id")(tmp_path) as url:
        backend: Any = open_backend(url)
        assert isinstance(backend, RedisClaimBackend)
        try:
            assert all(backend.claim_many([("job", slot) for slot in slots(1000)]))
            with redis.Redis.from_url(SERVICES["redis"].url) as client:
                length = client.xlen(backend.stream_key("job"))
        finally:
            backend.close()
    assert 0 < length <= 3 * STREAM_KEEP


def test_script_keys_expire_after_retention(tmp_path: Path) -> None:
    with redis_claim("script")(tmp_path) as url:
        backend: Any = open_backend(url + "&retention=90")
        assert isinstance(backend, RedisClaimBackend)
        slot = slots(1)[0]
        try:
            assert backend.claim("job", slot)
            with redis.Redis.from_url(SERVICES["redis"].url) as client:
                ttl = client.pttl(backend.run_key("job", slot))
        finally:
            backend.close()
    assert backend.remembers_for == 90.0
    assert 80_000 < ttl <= 90_000


def test_script_is_loaded_again_after_a_script_flush(tmp_path: Path) -> None:
    with redis_claim("script")(tmp_path) as url:
        backend: Any = open_backend(url)
        first, second = slots(2)
        try:
            assert backend.claim("job", first)
            with redis.Redis.from_url(SERVICES["redis"].url) as client:
                client.script_flush()
            assert backend.claim_many([("job", first), ("job", second)]) == [False, True]
        finally:
            backend.close()


def test_keys_carry_the_job_as_hash_tag(backend: RedisClaimBackend) -> None:
    slot = slots(1)[0]
    assert "{nightly}" in backend.stream_key("nightly")
    assert "{nightly}" in backend.run_key("nightly", slot)


def test_idmp_is_refused_by_an_older_server() -> None:
    url = SERVICES["redis"].url
    with redis.Redis.from_url(url) as client:
        version = str(client.info("server")["redis_version"])
    if tuple(int(p) for p in version.split(".")[:2]) >= (8, 6):
        pytest.skip(f"the test Redis runs {version}, which supports IDMP")
    with pytest.raises(ConfigurationError, match=r"needs Redis 8\.6 or newer.*strategy=script"):
        open_backend(f"{url}?strategy=idmp")


@pytest.mark.skipif(
    not os.environ.get(REDIS86_ENV),
    reason=f"strategy=idmp needs Redis 8.6+: set {REDIS86_ENV} to one. Skipped even under "
    "RELAY_REQUIRE_SERVICES=1: CI's Redis is older, and the refusal is tested against it",
)
def test_idmp_wins_each_run_once(tmp_path: Path) -> None:
    with redis_claim("idmp")(tmp_path) as url:
        backend: Any = open_backend(url + "&retention=120")
        try:
            first, second = slots(2)
            assert backend.claim_many([("job", first), ("job", second)]) == [True, True]
            assert backend.claim("job", first) is False
            assert backend.remembers_for == 120.0
        finally:
            backend.close()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("strategy=stream-id&retention=10", "does not know the URL option.*retention"),
        ("strategy=script&colour=red", "does not know the URL option.*colour"),
        ("strategy=script&retention=-1", "must be a positive number"),
        ("strategy=idmp&retention=100000", "from 1 to 86400"),
        ("strategy=idmp&retention=1.5", "whole number"),
    ],
)
def test_bad_options_are_refused(query: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_backend(f"redis://127.0.0.1:1/0?{query}")


@pytest.mark.parametrize("strategy", [*STRATEGIES, "idmp"])
def test_a_port_nothing_listens_on_is_unavailable(strategy: str) -> None:
    with pytest.raises(BackendUnavailable, match="check that the server is running"):
        open_backend(f"redis://127.0.0.1:1/0?strategy={strategy}")


def test_refused_credentials_are_unavailable() -> None:
    base = SERVICES["redis"].url.replace("redis://", "redis://nobody:wrong@", 1)
    with pytest.raises(BackendUnavailable, match=r"refused the credentials.*password"):
        open_backend(f"{base}?strategy=script")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_server_that_goes_away_is_unavailable_until_it_returns(
    strategy: str, tmp_path: Path
) -> None:
    first, second = slots(2)
    with own_redis(tmp_path) as server:
        backend: Any = open_backend(f"{server.url}?strategy={strategy}&socket_timeout=5")
        try:
            assert backend.claim("job", first)
            server.kill()
            with pytest.raises(BackendUnavailable, match="check that the server is running"):
                backend.claim("job", second)
            server.start()  # it kept nothing: the script strategy loads its script again
            assert backend.claim("job", second)
        finally:
            backend.close()
