"""Every lease store keeps the job definitions an instance declares with its heartbeat.

An additive part of the instance's record (issue 39, item 7): a record written without it (Relay
0.1.0, a worker) reads as declaring nothing. SQLite and PostgreSQL gain its column in a layout step
that only adds (SQLite 9, PostgreSQL 18), so Relay 0.1.0 still uses them (relay.layout).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from relay import LeaseBackend, open_backend
from relay.backends import _sqlite_layout
from relay.backends import sqlite as sqlite_backend
from relay.backends._postgres_schema import _META, _MIGRATIONS, LEGACY_VERSION
from relay.instances import InstanceInfo, parse_definitions
from tests.support.backends import postgres_lease
from tests.support.services import SERVICES

STARTED = datetime(2026, 12, 7, 8, 0, tzinfo=timezone.utc)


def instance(owner: str, definitions: dict[str, str] | None = None) -> InstanceInfo:
    texts = {digest: f"cron for {digest}" for digest in (definitions or {}).values()}
    return InstanceInfo(
        owner, "scheduler", "host-1", 4242, STARTED, "0.2.0", 10.0,
        definitions=definitions or {}, definition_texts=texts,
    )  # fmt: skip


def test_declared_definitions_are_read_back_by_every_reader(
    lease_url: str, lease_backend: LeaseBackend
) -> None:
    declared = {"report": "9f7183096993", "cleanup": "d13cdea0d148"}
    lease_backend.record_instance(instance("new:1", declared), ttl=600)
    lease_backend.record_instance(instance("old:2"), ttl=600)  # declares nothing (Relay 0.1.0)
    reader = open_backend(lease_url, read_only=True)
    try:
        for found in (lease_backend.instances(), reader.instances()):  # type: ignore[union-attr]
            by_owner = {i.owner: i for i in found}
            assert by_owner["new:1"].definitions == declared
            assert by_owner["new:1"].definition_texts == {
                "9f7183096993": "cron for 9f7183096993", "d13cdea0d148": "cron for d13cdea0d148"
            }  # fmt: skip
            assert (by_owner["old:2"].definitions, by_owner["old:2"].definition_texts) == ({}, {})
    finally:
        reader.close()


def test_a_beat_without_definitions_replaces_one_with_them(lease_backend: LeaseBackend) -> None:
    lease_backend.record_instance(instance("a:1", {"report": "9f7183096993"}), ttl=600)
    lease_backend.record_instance(instance("a:1"), ttl=600)
    [found] = lease_backend.instances()
    assert found.definitions == {}


def test_fields_a_newer_relay_adds_to_the_declaration_are_ignored() -> None:
    text = '{"jobs": {"report": "abc"}, "texts": {"abc": "every 60s"}, "since": 3}'
    assert parse_definitions(text) == {
        "definitions": {"report": "abc"}, "definition_texts": {"abc": "every 60s"}
    }  # fmt: skip
    assert parse_definitions(None) == parse_definitions("[]") == {}


def test_sqlite_adds_the_column_in_its_layout_step_and_relay_0_1_still_opens_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "relay.db"
    url = f"sqlite:///{path}"
    with monkeypatch.context() as patched:  # the file as Relay 0.1.0 (layout 7) left it
        patched.setattr(sqlite_backend, "SCHEMA_VERSION", _sqlite_layout.LEGACY_VERSION)
        open_backend(url).close()
    with closing(sqlite3.connect(path)) as conn, conn:  # a beat of Relay 0.1.0: its own columns
        conn.execute(
            "INSERT INTO relay_instances (owner, role, host, pid, started_ms, version, "
            "interval_ms, beat_ms, expires_ms, tasks) "
            "VALUES ('old:1', 'scheduler', 'h', 1, 0, '0.1.0', 10000, 0, 9999999999999, NULL)"
        )
        columns = {row[1] for row in conn.execute("PRAGMA table_info(relay_instances)")}
    assert "definitions" not in columns
    reader = open_backend(url, read_only=True)
    try:
        assert [(i.owner, i.definitions) for i in reader.instances()] == [("old:1", {})]  # type: ignore[union-attr]
    finally:
        reader.close()
    writer = open_backend(url)  # migrates: the definitions column comes with a layout step
    try:
        writer.record_instance(instance("new:2", {"report": "abc"}), ttl=600)  # type: ignore[union-attr]
        found = {i.owner: i.definitions for i in writer.instances()}  # type: ignore[union-attr]
        assert found == {"old:1": {}, "new:2": {"report": "abc"}}
    finally:
        writer.close()
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("SELECT value FROM relay_meta WHERE key = 'schema_version'")
        assert version.fetchall() == [(str(_sqlite_layout.LEGACY_VERSION),)]  # 0.1.0 opens it
        layout = conn.execute("SELECT layout FROM relay_layout").fetchall()
    assert layout == [(sqlite_backend.SCHEMA_VERSION,)]


@pytest.fixture
def postgres_lease_url(tmp_path: Path) -> Iterator[str]:
    with postgres_lease(tmp_path) as url:
        yield url


@pytest.mark.postgres
def test_postgres_reads_a_relay_0_1_schema_and_its_migration_adds_the_column(
    postgres_lease_url: str,
) -> None:
    schema = postgres_lease_url.rsplit("schema=", 1)[1]
    name = sql.Identifier(schema)
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        with conn.transaction():  # the schema as Relay 0.1.0 made it (its last migration: 16)
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
            conn.execute(sql.SQL(_META).format(schema=name))
            for number in range(1, LEGACY_VERSION + 1):
                conn.execute(sql.SQL(_MIGRATIONS[number]).format(schema=name))
            conn.execute(
                sql.SQL("INSERT INTO {}.meta VALUES ('schema_version', %s)").format(name),
                (str(LEGACY_VERSION),),
            )
        conn.execute(
            sql.SQL("INSERT INTO {}.instances VALUES ('old:1', 'scheduler', 'h', 1, now(), "
                    "'0.1.0', 10, now(), now() + interval '1h', NULL)").format(name)
        )  # fmt: skip
    reader = open_backend(postgres_lease_url, read_only=True)
    try:
        assert [(i.owner, i.definitions) for i in reader.instances()] == [("old:1", {})]  # type: ignore[union-attr]
    finally:
        reader.close()
    writer = open_backend(postgres_lease_url)  # the schema's owner: migrates, only adding
    try:
        writer.record_instance(instance("new:2", {"report": "abc"}), ttl=600)  # type: ignore[union-attr]
        found = {i.owner: i.definitions for i in writer.instances()}  # type: ignore[union-attr]
        assert found == {"old:1": {}, "new:2": {"report": "abc"}}
    finally:
        writer.close()
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        query = sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'")
        meta = conn.execute(query.format(name)).fetchall()
    assert meta == [(str(LEGACY_VERSION),)]  # what Relay 0.1.0 compares: it goes on
