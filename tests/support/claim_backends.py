"""URL factories for the server claim backends: a fresh key prefix, queue prefix or stream per test.

Redis keys and NATS streams are deleted after the test. RabbitMQ offers no way to list queues over
AMQP, so the test's gate queues are left to expire: the URL sets ``retention=120``, and each queue
deletes itself two minutes after its last use.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.support.services import SERVICES

__all__ = [
    "REDIS86_ENV",
    "TEST_QUEUE_RETENTION",
    "delete_nats_stream",
    "delete_redis_keys",
    "nats_dedup_claim",
    "rabbitmq_claim",
    "redis_claim",
    "server_claims",
]

REDIS86_ENV = "RELAY_TEST_REDIS86_URL"
"""A Redis 8.6 or newer for strategy=idmp; the servers here are older."""
TEST_QUEUE_RETENTION = 120


def _join(base: str, query: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}{query}"


def _unique(prefix: str) -> str:
    from tests.support.backends import unique

    return unique(prefix)


def delete_redis_keys(base: str, prefix: str) -> None:
    """Delete every key under ``prefix`` on the server ``base`` names."""
    import redis

    with redis.Redis.from_url(base) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


def redis_claim(strategy: str) -> Callable[[Path], AbstractContextManager[str]]:
    """A factory for ``strategy`` on the test Redis (``idmp``: on the Redis 8.6 of REDIS86_ENV)."""

    @contextmanager
    def factory(tmp_path: Path) -> Iterator[str]:
        base = os.environ[REDIS86_ENV] if strategy == "idmp" else SERVICES["redis"].url
        prefix = _unique("relay_c") + ":"
        try:
            yield _join(base, f"strategy={strategy}&prefix={prefix}")
        finally:
            delete_redis_keys(base, prefix)

    return factory


@contextmanager
def rabbitmq_claim(tmp_path: Path) -> Iterator[str]:
    """A fresh queue prefix on the test RabbitMQ; its queues expire on their own."""
    prefix = _unique("relay_c")
    yield _join(SERVICES["rabbitmq"].url, f"prefix={prefix}&retention={TEST_QUEUE_RETENTION}")


def delete_nats_stream(base: str, stream: str) -> None:
    """Delete a JetStream stream if it exists."""
    import nats
    import nats.js.errors

    async def delete() -> None:
        client = await nats.connect(servers=[base], connect_timeout=5, allow_reconnect=False)
        try:
            await client.jetstream().delete_stream(stream)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await client.close()

    asyncio.run(delete())


@contextmanager
def nats_dedup_claim(tmp_path: Path) -> Iterator[str]:
    """A fresh JetStream stream on the test NATS, deleted afterwards."""
    base, stream = SERVICES["nats"].url, _unique("RELAY_C")
    try:
        yield _join(base, f"strategy=dedup&stream={stream}")
    finally:
        delete_nats_stream(base, stream)


def server_claims() -> list[object]:
    """pytest params for the claim backends that need a server, each with its service mark."""
    return [
        pytest.param(redis_claim("stream-id"), marks=pytest.mark.redis, id="redis-stream-id"),
        pytest.param(redis_claim("script"), marks=pytest.mark.redis, id="redis-script"),
        pytest.param(rabbitmq_claim, marks=pytest.mark.rabbitmq, id="rabbitmq"),
        pytest.param(nats_dedup_claim, marks=pytest.mark.nats, id="nats-dedup"),
    ]
