"""Expand, then contract: a release's migrations only add to what the floor's Relay uses.

The floor's Relay (relay.layout.FLOOR, the previous release) made the layout
``LEGACY_VERSION``; every migration after it must keep each table, column (type, default,
nullability), index, constraint, domain, trigger and function signature that layout has, so
the previous release keeps working on a store this one migrated (functions may change their body:
a wrapper over a new one is allowed). What only older Relays used goes in ``CONTRACTIONS``,
run by ``relay migrate --contract``. The same for SQLite's file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from relay.backends import _sqlite_layout
from relay.backends import sqlite as sqlite_backend
from relay.backends._postgres_schema import _MIGRATIONS, LEGACY_VERSION, SCHEMA_VERSION, migrate
from relay.backends.sqlite import SQLiteLeaseBackend
from tests.backends.test_postgres_schema import Conn, catalog
from tests.support.backends import unique
from tests.support.services import SERVICES

_KEPT = ("relations", "columns", "indexes", "constraints", "domains", "triggers")


@pytest.fixture
def conn() -> Iterator[Conn]:
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as opened:
        yield opened


@pytest.fixture
def schema(conn: Conn) -> Iterator[str]:
    name = unique()
    yield name
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _at(conn: Conn, schema: str, version: int) -> None:
    """``schema`` as migrations 1 to ``version`` leave it (as the floor's Relay made it)."""
    name = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
        conn.execute(
            sql.SQL("CREATE TABLE {}.meta (key text PRIMARY KEY, value text NOT NULL)").format(name)
        )
        for number in range(1, version + 1):
            conn.execute(sql.SQL(_MIGRATIONS[number]).format(schema=name))
        conn.execute(
            sql.SQL("INSERT INTO {}.meta VALUES ('schema_version', %s)").format(name),
            (str(version),),
        )


def _signatures(found: dict[str, list[tuple[object, ...]]]) -> set[tuple[object, ...]]:
    return {row[:2] for row in found["functions"]}


@pytest.mark.postgres
def test_postgres_migrations_after_the_floors_layout_only_add(conn: Conn, schema: str) -> None:
    _at(conn, schema, LEGACY_VERSION)
    before = catalog(conn, schema)
    assert migrate(conn, schema, "the test server", allowed=True) == LEGACY_VERSION
    after = catalog(conn, schema)
    for kind in _KEPT:
        gone = set(before[kind]) - set(after[kind])
        assert not gone, f"a migration after {LEGACY_VERSION} removed or changed {kind}: {gone}"
    assert _signatures(before) <= _signatures(after)
    assert ("schema_version", str(LEGACY_VERSION)) in after["meta"]  # Relay 0.1 goes on
    if SCHEMA_VERSION > LEGACY_VERSION:
        assert before != after  # the check above compared two different catalogs


def test_sqlite_migrations_after_the_floors_layout_only_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "relay.db"
    with monkeypatch.context() as patched:  # the file as the floor's Relay left it
        patched.setattr(sqlite_backend, "SCHEMA_VERSION", _sqlite_layout.LEGACY_VERSION)
        SQLiteLeaseBackend(path).close()
    before = _sqlite_catalog(path)
    SQLiteLeaseBackend(path).close()
    after = _sqlite_catalog(path)
    assert before <= after, before - after
    assert before != after  # versions 8 and 9 added a column each


def _sqlite_catalog(path: Path) -> set[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        objects = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        columns = {
            (table, *column)
            for kind, table, _ in objects
            if kind == "table"
            for column in conn.execute(f"PRAGMA table_info({table})")
        }
    return {(kind, name) for kind, name, _ in objects} | columns
