"""Backend URLs, one fresh store per test: a file, a schema, a key prefix, a bucket.

Each entry maps a backend name to a context manager factory that yields a URL isolated to one
test. Tests pass the URL to real processes, which open the same store from it. A backend module
plugs into the contract suites by adding its entry to ``LEASE_BACKENDS`` or ``CLAIM_BACKENDS``.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path

import pytest

from tests.support.claim_backends import (
    REDIS86_ENV,
    nats_dedup_claim,
    rabbitmq_claim,
    redis_claim,
)
from tests.support.nats_server import nats_kv_lease

UrlFactory = Callable[[Path], AbstractContextManager[str]]


def unique(prefix: str = "relay_t") -> str:
    """A name no other test uses."""
    return f"{prefix}_{secrets.token_hex(4)}"


@contextmanager
def sqlite_lease(tmp_path: Path) -> Iterator[str]:
    """A fresh file; afterwards, each job row must still count its job's live runs right."""
    path = tmp_path / "relay.db"
    yield f"sqlite:///{path}"
    if path.exists():
        assert sqlite_live_counts(path) == sqlite_live_runs(path)


def sqlite_live_counts(path: Path) -> dict[str, int]:
    """How many live runs each job row of a Relay SQLite file says its job has (zeros left out)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT job, live FROM relay_runs WHERE state = 'job' AND live != 0")
        return dict(rows.fetchall())


def sqlite_live_runs(path: Path) -> dict[str, int]:
    """How many runs of each job are running or pending in a Relay SQLite file, counted."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT job, count(*) FROM relay_runs WHERE state IN ('running', 'pending') "
            "GROUP BY job"
        )
        return dict(rows.fetchall())


@contextmanager
def sqlite_claim(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim"


@contextmanager
def postgres_lease(tmp_path: Path) -> Iterator[str]:
    """A fresh schema on the test server's database, dropped afterwards."""
    import psycopg

    from tests.support.services import SERVICES

    base, schema = SERVICES["postgres"].url, unique()
    try:
        yield f"{base}{'&' if '?' in base else '?'}schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def redis_lease(tmp_path: Path) -> Iterator[str]:
    """A fresh key prefix on the test Redis, its keys deleted afterwards."""
    import redis

    from tests.support.services import SERVICES

    base, prefix = SERVICES["redis"].url, unique() + ":"
    try:
        yield f"{base}{'&' if '?' in base else '?'}prefix={prefix}"
    finally:
        with redis.Redis.from_url(base) as client:
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)


LEASE_BACKENDS: dict[str, tuple[UrlFactory, list[pytest.MarkDecorator]]] = {
    "sqlite": (sqlite_lease, []),
    "postgres": (postgres_lease, [pytest.mark.postgres]),
    "redis": (redis_lease, [pytest.mark.redis]),
    "nats": (nats_kv_lease, [pytest.mark.nats_kv]),
}
"""Lease backends the lease contract suite runs against: name -> (URL factory, marks)."""

CLAIM_BACKENDS: dict[str, tuple[UrlFactory, list[pytest.MarkDecorator]]] = {
    "sqlite-claim": (sqlite_claim, []),
    "redis-stream-id": (redis_claim("stream-id"), [pytest.mark.redis]),
    "redis-script": (redis_claim("script"), [pytest.mark.redis]),
    "rabbitmq": (rabbitmq_claim, [pytest.mark.rabbitmq]),
    "nats-dedup": (nats_dedup_claim, [pytest.mark.nats]),
}
"""Claim backends the claim contract suite runs against: name -> (URL factory, marks)."""
if os.environ.get(REDIS86_ENV):  # strategy=idmp needs Redis 8.6+; the servers here are older
    CLAIM_BACKENDS["redis-idmp"] = (redis_claim("idmp"), [pytest.mark.redis])


def params(registry: dict[str, tuple[UrlFactory, list[pytest.MarkDecorator]]]) -> list[object]:
    """pytest params for a registry, each carrying its service marks."""
    return [pytest.param(name, marks=marks, id=name) for name, (_, marks) in registry.items()]
