"""Every lease store records its layout and the oldest Relay that can use it (relay.layout).

A newer layout record is written into a real store of each kind, as a later Relay would leave
it: a floor above this Relay is refused by name (``StoreTooNew``), at open and at the first call
that fails in a way the newer layout explains; a newer layout whose floor this Relay meets is
used as it is; fields a newer Relay added are read past and kept.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from relay import AcquireRequest, Outcome, __version__, open_backend
from relay.backends._postgres_schema import LEGACY_VERSION, SCHEMA_VERSION
from relay.backends.nats_kv import NatsLeaseBackend
from relay.backends.postgres import PostgresLeaseBackend
from relay.errors import BackendUnavailable, ConfigurationError, StoreTooNew, StoreTooOld
from relay.layout import FLOOR, Layout, LayoutStore, version_key
from tests.support.services import SERVICES

SLOT = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
_VERSION = "SELECT key, value FROM \"{}\".meta WHERE key = 'schema_version'"
_SQLITE_VERSION = "SELECT value FROM relay_meta WHERE key = 'schema_version'"
TOO_NEW = (
    r"at layout version \d+, made by a newer Relay, which needs Relay 0\.3 or newer; "
    r"this is Relay 0\.2: upgrade Relay"
)


def _request(job: str = "report", minutes: int = 0) -> AcquireRequest:
    return AcquireRequest(job, SLOT + timedelta(minutes=minutes), "me", 30)


def _store(url: str, **options: Any) -> Any:
    backend = open_backend(url, **options)
    assert isinstance(backend, LayoutStore)
    return backend


def test_this_release_is_0_2_and_its_floor_the_release_before() -> None:
    assert __version__ == "0.2.0"
    assert FLOOR == "0.1.0"
    assert version_key("0.3.0rc1") == (0, 3, 0) and version_key("0.10.1") > version_key("0.9")


def test_a_store_records_its_layout_and_the_previous_release_as_its_floor(lease_url: str) -> None:
    backend = _store(lease_url)
    try:
        found = backend.layout()
        assert found is not None and found.layout >= 1 and found.min_relay == FLOOR
        assert found.usable("0.1.0") and not found.usable("0.0.9")
    finally:
        backend.close()


def test_a_floor_above_this_relay_is_refused_by_name_at_open(lease_url: str) -> None:
    backend = _store(lease_url)
    found = backend.layout()
    assert found is not None
    backend.record_layout(Layout(found.layout + 2, "0.3.0"))
    backend.close()
    with pytest.raises(StoreTooNew, match=TOO_NEW) as refused:
        open_backend(lease_url)
    assert refused.value.needs == "0.3.0" and refused.value.layout == found.layout + 2
    assert "unavailable" not in str(refused.value) and "dropped" not in str(refused.value)
    with pytest.raises(StoreTooNew, match=TOO_NEW):
        open_backend(lease_url, read_only=True)  # relay runs, jobs, health...


def test_a_newer_layout_whose_floor_this_relay_meets_is_used_as_it_is(lease_url: str) -> None:
    backend = _store(lease_url)
    found = backend.layout()
    assert found is not None
    newer = Layout(found.layout + 1, "0.2.0")
    backend.record_layout(newer)
    backend.close()
    again = _store(lease_url)
    try:
        assert again.acquire(_request()).outcome is Outcome.WON
        assert again.layout() == newer  # neither migrated down nor its floor lowered
    finally:
        again.close()


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_keeps_relay_0_1s_schema_version_in_meta_while_0_1_may_use_it(
    tmp_path: Any,
) -> None:
    from tests.support.backends import postgres_lease

    with postgres_lease(tmp_path) as url:
        backend = open_backend(url)
        assert isinstance(backend, PostgresLeaseBackend)
        schema = backend.schema
        try:
            with psycopg.connect(SERVICES["postgres"].url) as conn:
                meta = conn.execute(_VERSION.format(schema)).fetchall()
                row = conn.execute(f'SELECT layout, min_relay FROM "{schema}".layout').fetchone()
            assert meta == [("schema_version", str(LEGACY_VERSION))]  # what Relay 0.1 compares
            assert row == (SCHEMA_VERSION, FLOOR)
            backend.record_layout(Layout(SCHEMA_VERSION, "0.2.0"))  # a contraction's floor
            with psycopg.connect(SERVICES["postgres"].url) as conn:
                meta = conn.execute(_VERSION.format(schema)).fetchall()
            assert meta == [("schema_version", str(SCHEMA_VERSION))]
        finally:
            backend.close()


@pytest.mark.postgres
def test_postgres_refuses_at_the_first_call_a_contraction_broke(tmp_path: Any) -> None:
    from tests.support.backends import postgres_lease

    with postgres_lease(tmp_path) as url:
        backend = open_backend(url)
        assert isinstance(backend, PostgresLeaseBackend)
        try:
            backend.acquire(_request())
            # A later Relay contracts the schema: a table this one uses is gone.
            with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
                conn.execute(f'ALTER TABLE "{backend.schema}".runs RENAME TO runs_0_3')
            with pytest.raises(BackendUnavailable, match="relay migrate") as unknown:
                backend.acquire(_request(minutes=1))
            assert "dropped" not in str(unknown.value)
            backend.record_layout(Layout(SCHEMA_VERSION + 2, "0.3.0"))
            with pytest.raises(StoreTooNew, match=TOO_NEW):
                backend.acquire(_request(minutes=2))
        finally:
            backend.close()


@pytest.mark.postgres
def test_postgres_at_an_older_layout_with_migrate_false_is_refused_by_name(tmp_path: Any) -> None:
    from tests.support.backends import postgres_lease

    with postgres_lease(tmp_path) as url:
        open_backend(url).close()
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
            conn.execute(f"UPDATE \"{schema}\".meta SET value = '5'")  # as Relay's schema 5
        with pytest.raises(StoreTooOld, match=r"version 5, older than .*relay migrate"):
            open_backend(url + "&migrate=false")


# -- SQLite ------------------------------------------------------------------------------------


def test_sqlite_keeps_relay_0_1s_schema_version_beside_its_layout(tmp_path: Any) -> None:
    path = tmp_path / "relay.db"
    backend = _store(f"sqlite:///{path}")
    backend.record_layout(Layout(10, "0.1.0"))  # a later Relay expanded it: Relay 0.1 may go on
    backend.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(_SQLITE_VERSION).fetchall() == [("7",)]
        assert conn.execute("SELECT layout, min_relay FROM relay_layout").fetchall() == [
            (10, "0.1.0")
        ]


def test_sqlite_without_a_record_from_a_newer_relay_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "relay.db"
    open_backend(f"sqlite:///{path}").close()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP TABLE relay_layout")
        conn.execute("UPDATE relay_meta SET value = '12'")
    with pytest.raises(ConfigurationError, match=r"layout version 12, .*needs Relay 0\.3"):
        open_backend(f"sqlite:///{path}")


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_reads_a_record_with_fields_a_newer_relay_added(
    redis_lease_url: str, redis_client: Any
) -> None:
    backend = _store(redis_lease_url)
    prefix = backend.prefix
    backend.close()
    assert json.loads(redis_client.get(f"{prefix}layout")) == {"layout": 1, "min_relay": FLOOR}
    newer = {"layout": 3, "min_relay": "0.2.0", "contracted_at": 1234, "notes": ["x"]}
    redis_client.set(f"{prefix}layout", json.dumps(newer))
    again = _store(redis_lease_url)
    try:
        assert again.layout() == Layout(3, "0.2.0")
        assert again.acquire(_request()).outcome is Outcome.WON
    finally:
        again.close()


# -- NATS KV -----------------------------------------------------------------------------------


@pytest.fixture
def nats_url(tmp_path: Any) -> Iterator[str]:
    from tests.support.backends import nats_kv_lease

    with nats_kv_lease(tmp_path) as url:
        yield url


def _nats(url: str) -> NatsLeaseBackend:
    backend = open_backend(url)
    assert isinstance(backend, NatsLeaseBackend)
    return backend


def _job_key(backend: NatsLeaseBackend, job: str) -> tuple[dict[str, Any], int]:
    entry = backend._call(backend._kv.get(f"job.{_token(job)}"))
    assert entry.value is not None and entry.revision is not None
    return json.loads(entry.value), entry.revision


def _put(backend: NatsLeaseBackend, key: str, value: dict[str, Any]) -> None:
    backend._call(backend._kv.put(key, json.dumps(value).encode()))


def _token(job: str) -> str:
    from relay.backends._nats_kv_state import key_token

    return key_token(job)


@pytest.mark.nats_kv
def test_nats_kv_keeps_fields_a_newer_relay_added_to_a_job_and_its_runs(nats_url: str) -> None:
    backend = _nats(nats_url)
    try:
        run = backend.acquire(_request()).run
        assert run is not None
        value, _ = _job_key(backend, "report")
        (stored,) = value["runs"].values()
        stored["definition_hash"] = "abc"  # fields a newer Relay writes
        value["definitions"] = {"0.3.0": "cron 0 10 * * *"}
        _put(backend, f"job.{_token('report')}", value)
        backend.finish(run.id, run.token, succeeded=True)
        after, _ = _job_key(backend, "report")
        (kept,) = after["runs"].values()
        assert kept["state"] == "succeeded" and kept["definition_hash"] == "abc"
        assert after["definitions"] == {"0.3.0": "cron 0 10 * * *"}
    finally:
        backend.close()


@pytest.mark.nats_kv
def test_nats_kv_refuses_by_name_a_value_only_a_newer_layout_explains(nats_url: str) -> None:
    backend = _nats(nats_url)
    try:
        backend.acquire(_request())
        value, _ = _job_key(backend, "report")
        value["format"] = 2  # a later Relay rewrote the job's key in its own format
        _put(backend, f"job.{_token('report')}", value)
        with pytest.raises(BackendUnavailable, match="unknown format"):
            backend.acquire(_request(minutes=1))  # no record explains it: the store misbehaves
        backend.record_layout(Layout(2, "0.3.0"))
        with pytest.raises(StoreTooNew, match=TOO_NEW):
            backend.acquire(_request(minutes=2))
    finally:
        backend.close()


def test_sqlite_with_migrate_false_never_migrates_and_relay_migrate_does(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.backends import sqlite as sqlite_backend
    from relay.migrate import migrate

    path = tmp_path / "relay.db"
    with monkeypatch.context() as patched:  # the file as Relay 0.1 (layout 7) left it
        patched.setattr(sqlite_backend, "SCHEMA_VERSION", 7)
        open_backend(f"sqlite:///{path}").close()
    url = f"sqlite:///{path}?migrate=false"
    with pytest.raises(StoreTooOld, match=r"version 7, older than .* migrate=false: run `relay"):
        open_backend(url)
    with closing(sqlite3.connect(path)) as conn:  # nothing changed
        assert conn.execute(_SQLITE_VERSION).fetchall() == [("7",)]
        columns = {row[1] for row in conn.execute("PRAGMA table_info(relay_instances)")}
    assert "problem" not in columns
    assert "ready" in migrate(url)  # the step migrate=false leaves to `relay migrate`
    open_backend(url).close()  # up to date: opens
    fresh = tmp_path / "new.db"
    open_backend(f"sqlite:///{fresh}?migrate=false").close()  # a new file is created all the same


def test_sqlite_refuses_at_the_first_write_a_contraction_broke(tmp_path: Any) -> None:
    path = tmp_path / "relay.db"
    backend = _store(f"sqlite:///{path}")
    try:
        backend.acquire(_request())
        with closing(sqlite3.connect(path)) as conn:  # a later Relay's contraction
            conn.execute("ALTER TABLE relay_runs RENAME TO relay_runs_0_3")
        with pytest.raises(sqlite3.OperationalError):  # nothing explains it: left as it was
            backend.acquire(_request(minutes=1))
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE relay_layout SET min_relay = '0.3.0', layout = 10")
        with pytest.raises(StoreTooNew, match=TOO_NEW):
            backend.acquire(_request(minutes=2))
    finally:
        backend.close()
