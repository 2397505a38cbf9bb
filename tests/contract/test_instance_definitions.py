"""Every lease store keeps the job definitions an instance declares with its heartbeat.

An additive part of the instance's record (issue 39, item 7): a record written without it (Relay
0.1.0, a worker) reads as declaring nothing, and SQLite and PostgreSQL gain its column at a
writable open without a new schema version, so Relay 0.1.0 still opens them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from relay import LeaseBackend, open_backend
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


def test_sqlite_gains_the_column_at_a_writable_open_without_a_new_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    open_backend(url).close()
    with sqlite3.connect(tmp_path / "relay.db") as conn:  # the file as Relay 0.1.0 made it
        conn.execute("ALTER TABLE relay_instances DROP COLUMN definitions")
        version = conn.execute("SELECT value FROM relay_meta WHERE key = 'schema_version'")
        before = version.fetchone()
    reader = open_backend(url, read_only=True)
    assert reader.instances() == []  # type: ignore[union-attr]
    reader.close()
    writer = open_backend(url)
    try:
        writer.record_instance(instance("a:1", {"report": "abc"}), ttl=600)  # type: ignore[union-attr]
        assert [i.definitions for i in writer.instances()] == [{"report": "abc"}]  # type: ignore[union-attr]
    finally:
        writer.close()
    with sqlite3.connect(tmp_path / "relay.db") as conn:
        after = conn.execute("SELECT value FROM relay_meta WHERE key = 'schema_version'")
        assert after.fetchone() == before  # Relay 0.1.0 still opens it


@pytest.fixture
def postgres_lease_url(tmp_path: Path) -> Iterator[str]:
    with postgres_lease(tmp_path) as url:
        yield url


@pytest.mark.postgres
def test_postgres_reads_a_schema_without_the_column_and_its_owner_adds_it(
    postgres_lease_url: str,
) -> None:
    writer = open_backend(postgres_lease_url)
    schema = writer.schema  # type: ignore[union-attr]
    writer.close()
    with psycopg.connect(
        SERVICES["postgres"].url, autocommit=True
    ) as conn:  # the schema as Relay 0.1.0 left it
        conn.execute(f'ALTER TABLE "{schema}".instances DROP COLUMN definitions')
        conn.execute(
            f'INSERT INTO "{schema}".instances VALUES '
            "('old:1', 'scheduler', 'h', 1, now(), '0.1.0', 10, now(), now() + interval '1h', NULL)"
        )
    reader = open_backend(postgres_lease_url, read_only=True)
    try:
        assert [(i.owner, i.definitions) for i in reader.instances()] == [("old:1", {})]  # type: ignore[union-attr]
    finally:
        reader.close()
    writer = open_backend(postgres_lease_url)
    try:
        writer.record_instance(instance("new:2", {"report": "abc"}), ttl=600)  # type: ignore[union-attr]
        found = {i.owner: i.definitions for i in writer.instances()}  # type: ignore[union-attr]
        assert found == {"old:1": {}, "new:2": {"report": "abc"}}
    finally:
        writer.close()
