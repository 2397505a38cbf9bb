"""Relay as a least-privilege PostgreSQL role: the owner runs ``relay migrate``, instances run with
the documented grants and never change the schema, and a schema they may not bring up to date is
refused naming ``relay migrate``, with nothing half-written.

Roles are server-wide: each test makes its own (an owner, an instance role, a reader) with a
fresh schema on the shared server, and drops them all afterwards, even on failure.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import relay
from relay import BackendUnavailable, open_backend
from relay.backends._postgres_schema import _MIGRATIONS, LEGACY_VERSION, SCHEMA_VERSION, grants
from relay.errors import MigrationRequired
from tests.support.backends import unique
from tests.support.services import require
from tests.support.short_run import tokens_of_a_few_runs

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "security.md"
RELAY = [sys.executable, "-m", "relay.cli"]


@dataclass(frozen=True)
class Roles:
    """A schema of the test's own, its owner, an instance role and a reader, all made here."""

    admin: str
    schema: str
    owner: str
    app: str
    reader: str

    def url(self, role: str, **options: str) -> str:
        """The shared server's URL, logged in as ``role``, on the test's schema."""
        parts = urlsplit(self.admin)
        netloc = f"{role}@{parts.hostname}:{parts.port or 5432}"
        query = "&".join(f"{k}={v}" for k, v in {"schema": self.schema, **options}.items())
        return urlunsplit(parts._replace(netloc=netloc, query=query))

    def sql(self, *statements: str, role: str | None = None) -> None:
        """Run statements as the server's admin, or as ``role`` (``SET ROLE``)."""
        with psycopg.connect(self.admin, autocommit=True) as conn:
            if role:
                conn.execute(f"SET ROLE {role}")
            for statement in statements:
                conn.execute(statement)

    def version(self) -> str | None:
        """The version the schema's meta table records, ``None`` without one."""
        with psycopg.connect(self.admin, autocommit=True) as conn:
            if conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.meta",)).fetchone() == (
                None,
            ):
                return None
            row = conn.execute(
                f"SELECT value FROM {self.schema}.meta WHERE key = 'schema_version'"
            ).fetchone()
            return None if row is None else str(row[0])

    def tables(self) -> set[str]:
        """The tables the schema holds."""
        with psycopg.connect(self.admin, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (self.schema,)
            ).fetchall()
        return {row[0] for row in rows}


@pytest.fixture
def roles() -> Iterator[Roles]:
    admin = require("postgres")
    tag = unique("")[1:]
    made = Roles(admin, f"relay_s{tag}", f"relay_owner{tag}", f"relay_app{tag}", f"relay_rd{tag}")
    names = (made.owner, made.app, made.reader)
    made.sql(*(f"CREATE ROLE {name} LOGIN" for name in names))
    try:
        # The database's administrator gives the owner its schema; the owner needs no CREATE
        # on the database, and the others get only what the grants say.
        made.sql(f"CREATE SCHEMA {made.schema} AUTHORIZATION {made.owner}")
        yield made
    finally:
        made.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE usename IN ('{made.owner}', '{made.app}', '{made.reader}')",
            f"DROP SCHEMA IF EXISTS {made.schema} CASCADE",
            *(f"DROP OWNED BY {name}" for name in names),
            *(f"DROP ROLE {name}" for name in names),
        )


def _relay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RELAY, *args], capture_output=True, text=True, timeout=60, check=False)


def _granted(roles: Roles) -> None:
    """The owner migrates with ``relay migrate``, then runs the documented grants."""
    done = _relay("migrate", "--backend", roles.url(roles.owner))
    assert done.returncode == 0, done.stderr
    assert f"created Relay's schema at version {SCHEMA_VERSION}" in done.stdout
    roles.sql(
        *grants(roles.schema, roles.app, roles.owner),
        *grants(roles.schema, roles.reader, roles.owner, read_only=True),
        role=roles.owner,
    )


def _older(roles: Roles, version: int) -> None:
    """The schema as a Relay of ``version`` left it, made by its owner."""
    statements = [f"CREATE TABLE {roles.schema}.meta (key text PRIMARY KEY, value text NOT NULL)"]
    statements += [_MIGRATIONS[n].replace("{schema}", roles.schema) for n in range(1, version + 1)]
    statements.append(f"INSERT INTO {roles.schema}.meta VALUES ('schema_version', '{version}')")
    roles.sql(*statements, role=roles.owner)


def test_the_documented_grants_are_the_ones_tested() -> None:
    text = DOCS.read_text()
    for statement in grants("relay", "relay_app", "relay_owner"):
        assert statement in text
    for statement in grants("relay", "relay_reader", "relay_owner", read_only=True):
        assert statement in text


def test_instances_control_and_readers_run_with_the_grants_only(
    roles: Roles, tmp_path: Path
) -> None:
    _granted(roles)
    url = roles.url(roles.app)
    ran = tokens_of_a_few_runs(url, lease=5, within=20)
    assert len(ran) >= 3 and ran == sorted(ran)
    with relay.Control(url) as control:
        assert control.pause("beat", reason="grants test")
        control.resume("beat")
        control.trigger("beat")
        assert control.prune(0) >= 0
    reader = roles.url(roles.reader)
    for command in ("runs", "jobs", "instances"):
        done = _relay(command, "--backend", reader, "--json")
        assert done.returncode == 0, (command, done.stderr)
        assert "beat" in done.stdout or command == "instances"
    done = _relay("health", "--backend", reader)
    assert done.returncode == 0, done.stderr
    page = tmp_path / "timeline.html"
    done = _relay("timeline", "--backend", reader, "--since", "1h", "--html", str(page))
    assert done.returncode == 0 and "beat" in page.read_text(), done.stderr


def test_the_instance_role_cannot_change_the_schema(roles: Roles) -> None:
    _granted(roles)
    with (
        psycopg.connect(roles.url(roles.app).split("?")[0]) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(f"DROP TABLE {roles.schema}.runs")
    # A reader's role opens a schema at this version without writing, then may not write.
    reader = open_backend(roles.url(roles.reader))
    with pytest.raises(BackendUnavailable, match=r"privilege \(permission denied for table"):
        reader.register_jobs({"beat": "every 60s"})  # type: ignore[union-attr]
    reader.close()


def test_a_missing_schema_is_refused_naming_relay_migrate(roles: Roles) -> None:
    roles.sql(f"DROP SCHEMA {roles.schema}")
    with pytest.raises(MigrationRequired, match="relay migrate") as caught:
        open_backend(roles.url(roles.app))
    assert "does not exist" in str(caught.value)
    roles.sql(f"CREATE SCHEMA {roles.schema} AUTHORIZATION {roles.owner}")
    with pytest.raises(MigrationRequired, match="holds no Relay tables"):
        open_backend(roles.url(roles.app))
    assert roles.tables() == set()


def test_an_older_schema_is_refused_and_left_as_it_was(roles: Roles) -> None:
    _older(roles, 3)
    roles.sql(*grants(roles.schema, roles.app, roles.owner), role=roles.owner)
    with pytest.raises(MigrationRequired, match=r"version 3, older.*relay migrate"):
        open_backend(roles.url(roles.app))
    assert roles.version() == "3" and "instances" not in roles.tables()
    done = _relay("migrate", "--backend", roles.url(roles.app))
    assert done.returncode == 1 and "does not own it" in done.stderr
    assert roles.version() == "3"


def test_default_privileges_cover_what_a_later_migration_creates(roles: Roles) -> None:
    _older(roles, 3)
    roles.sql(*grants(roles.schema, roles.app, roles.owner), role=roles.owner)
    done = _relay("migrate", "--backend", roles.url(roles.owner))
    assert done.returncode == 0, done.stderr
    assert f"migrated Relay's schema from version 3 to {SCHEMA_VERSION}" in done.stdout
    scheduler = relay.Scheduler(roles.url(roles.app), tick=0.05)  # records itself: version 4
    scheduler.job(every=60, name="later")(lambda run: None)
    scheduler.run_pending()
    scheduler.shutdown()
    reader = open_backend(roles.url(roles.app), read_only=True)
    assert [i.role for i in reader.instances()] == ["scheduler"]  # type: ignore[attr-defined]
    reader.close()


def test_migrate_false_keeps_even_an_owner_from_migrating(roles: Roles) -> None:
    with pytest.raises(MigrationRequired, match="migrate=false"):
        open_backend(roles.url(roles.owner, migrate="false"))
    assert roles.tables() == set()
    open_backend(roles.url(roles.owner)).close()  # today's behaviour: the owner migrates at start
    assert roles.version() == str(LEGACY_VERSION)  # meta: what Relay 0.1 reads (relay.layout)
    open_backend(roles.url(roles.owner, migrate="false")).close()  # up to date: opens


def test_a_migration_refused_half_way_leaves_nothing_behind(roles: Roles) -> None:
    _older(roles, 3)
    roles.sql(f"ALTER TABLE {roles.schema}.jobs OWNER TO CURRENT_USER")  # version 5 alters it
    done = _relay("migrate", "--backend", roles.url(roles.owner))
    assert done.returncode == 1
    assert "nothing was changed" in done.stderr and "must be owner" in done.stderr
    assert roles.version() == "3" and "instances" not in roles.tables()  # version 4's table


def test_a_role_without_grants_is_told_which_to_add(roles: Roles) -> None:
    open_backend(roles.url(roles.owner)).close()
    with pytest.raises(BackendUnavailable, match=f"GRANT USAGE ON SCHEMA {roles.schema}"):
        open_backend(roles.url(roles.app))
    roles.sql(f"GRANT USAGE ON SCHEMA {roles.schema} TO {roles.app}", role=roles.owner)
    with pytest.raises(BackendUnavailable, match="GRANT SELECT, INSERT, UPDATE, DELETE ON ALL"):
        open_backend(roles.url(roles.app))
