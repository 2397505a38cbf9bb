"""Fenced writes refuse a writer whose token is older than the one stored, on each store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from relay.fencing import SQLFence, redis_fenced_set
from tests.support.backends import unique
from tests.support.services import SERVICES


def check_fence(fence: SQLFence) -> None:
    fence.create_table()
    assert fence.write("report", 5, "first") is True
    assert fence.write("report", 5, "again, same token") is True
    assert fence.write("report", 4, "stale") is False
    assert fence.read("report") == (5, "again, same token")
    assert fence.write("report", 6, "newer") is True
    assert fence.read("report") == (6, "newer")
    assert fence.read("missing") is None


def test_sqlite_fence(tmp_path: Path) -> None:
    check_fence(SQLFence(sqlite3.connect(tmp_path / "f.db")))


def test_table_names_are_checked() -> None:
    with pytest.raises(ValueError, match="identifier"):
        SQLFence(sqlite3.connect(":memory:"), table="x; DROP TABLE y")


@pytest.mark.postgres
def test_postgres_fence() -> None:
    psycopg = pytest.importorskip("psycopg")
    table = unique("fenced")
    with psycopg.connect(SERVICES["postgres"].url) as conn:
        try:
            check_fence(SQLFence(conn, table=table, placeholder="%s"))
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.commit()


@pytest.mark.redis
def test_redis_fence() -> None:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(SERVICES["redis"].url)
    key = unique("fenced")
    try:
        assert redis_fenced_set(client, key, 5, "first") is True
        assert redis_fenced_set(client, key, 4, "stale") is False
        assert redis_fenced_set(client, key, 6, "newer") is True
        assert client.hgetall(key) == {b"token": b"6", b"value": b"newer"}
    finally:
        client.delete(key)
        client.close()
