"""Relay's PostgreSQL schema: its version, who may create or upgrade it, and the migration.

The schema's owner (a member of the role that owns it, or a role with ``CREATE`` on the database
while the schema does not exist yet) migrates it, on first use or with ``relay migrate``. Any
other role only reads the version: it never issues DDL, and a schema missing or older than this
Relay needs raises :class:`~relay.errors.MigrationRequired` naming ``relay migrate``. A migration
runs in one transaction under an advisory lock, so a refusal half-way leaves nothing behind.

A fresh install runs ``postgres_schema.sql``, the schema as it is today; an install at version k
runs ``postgres_migrations/`` k+1 to :data:`SCHEMA_VERSION`, one file per version.
``tests/backends/test_postgres_schema.py`` holds both paths to the same catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from relay.errors import ConfigurationError, MigrationRequired

__all__ = [
    "ADDITIVE",
    "SCHEMA_VERSION",
    "SchemaState",
    "additive",
    "check_newer",
    "grants",
    "installed_version",
    "migrate",
    "migration_required",
    "schema_state",
    "sections",
]

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('relay.schema'), hashtext(%s))"
_META = "CREATE TABLE IF NOT EXISTS {schema}.meta (key text PRIMARY KEY, value text NOT NULL)"
# One round trip: does the schema exist, may we use it, may we change it.
_STATE = """
SELECT n.oid IS NOT NULL, coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
       CASE WHEN n.oid IS NULL THEN has_database_privilege(current_database(), 'CREATE')
            ELSE pg_has_role(n.nspowner, 'USAGE') END,
       current_user,
       EXISTS (SELECT 1 FROM pg_class AS c WHERE c.relnamespace = n.oid AND c.relname = 'meta')
FROM (SELECT 1) AS one LEFT JOIN pg_namespace AS n ON n.nspname = %s
"""


ADDITIVE = "ALTER TABLE {schema}.instances ADD COLUMN IF NOT EXISTS definitions text"
"""A column added beside the numbered versions, by the schema's owner at open: a newer version
would keep Relay 0.1.0 (which refuses one) from opening the schema, and it ignores the column. It
holds the job definitions an instance declares (:mod:`relay.definitions`)."""
_HAS_ADDITIVE = """
SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s)
               AND attname = 'definitions' AND NOT attisdropped)
"""


def additive(conn: psycopg.Connection[Any], schema: str, *, change: bool) -> bool:
    """Whether ``schema``'s instances table has the :data:`ADDITIVE` column, adding it first
    when ``change`` and the connected role owns the schema (never any DDL otherwise)."""
    table = sql.SQL("{}.instances").format(sql.Identifier(schema)).as_string(conn)
    row = conn.execute(_HAS_ADDITIVE, (table,)).fetchone()
    if (row is not None and row[0]) or not change:
        return bool(row and row[0])
    if not schema_state(conn, schema).may_migrate:
        return False
    with conn.transaction():
        conn.execute(_LOCK, (schema,))
        conn.execute(sql.SQL(ADDITIVE).format(schema=sql.Identifier(schema)))
    return True


def sections(filename: str, marker: str) -> dict[str, str]:
    """Split a SQL data file of :mod:`relay.backends` at ``-- <marker> <key>`` lines."""
    text = resources.files("relay.backends").joinpath(filename).read_text()
    parts = re.split(rf"^-- {marker} (\w+)\s*$", text, flags=re.MULTILINE)
    return {key: body.strip() for key, body in zip(parts[1::2], parts[2::2], strict=True)}


def _migrations() -> dict[int, str]:
    """``postgres_migrations/000N_….sql`` by version: each brings version N-1 to N."""
    folder = resources.files("relay.backends").joinpath("postgres_migrations")
    found = {int(f.name[:4]): f.read_text() for f in folder.iterdir() if f.name.endswith(".sql")}
    return dict(sorted(found.items()))


# What a fresh install runs (the schema at SCHEMA_VERSION), and how an older install gets there.
_SCHEMA = resources.files("relay.backends").joinpath("postgres_schema.sql").read_text()
_MIGRATIONS = _migrations()
SCHEMA_VERSION = max(_MIGRATIONS)
"""The schema version this Relay creates; older schemas are migrated up to it by their owner."""


def grants(schema: str, role: str, owner: str, *, read_only: bool = False) -> list[str]:
    """The statements the schema's ``owner`` runs so that ``role`` may run Relay, and no more.

    ``read_only``: only what the commands that read need (``relay runs``, ``jobs``, ``health``…).
    Default privileges extend the grants to what a later ``relay migrate`` creates. Relay's schema
    has no sequence today; their line only keeps a future version's covered.
    """
    tables = "SELECT" if read_only else "SELECT, INSERT, UPDATE, DELETE"
    default = f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT"
    statements = [
        f"GRANT USAGE ON SCHEMA {schema} TO {role};",
        f"GRANT {tables} ON ALL TABLES IN SCHEMA {schema} TO {role};",
        f"{default} {tables} ON TABLES TO {role};",
    ]
    if not read_only:
        statements[2:2] = [f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};"]
        statements += [
            f"{default} EXECUTE ON FUNCTIONS TO {role};",
            f"{default} USAGE, SELECT ON SEQUENCES TO {role};",
        ]
    return statements


@dataclass(frozen=True)
class SchemaState:
    """What the connected role finds and may do: read before any change is decided."""

    exists: bool
    usable: bool
    """The role has ``USAGE`` on the schema (``False`` when it does not exist)."""
    may_migrate: bool
    """The role owns the schema (is a member of its owner), or may create it where it is absent."""
    user: str
    has_meta: bool
    """The schema holds Relay's ``meta`` table (read from the catalog: no grant needed)."""


def schema_state(conn: psycopg.Connection[Any], schema: str) -> SchemaState:
    """Whether ``schema`` exists, and whether the connected role may use and change it."""
    row = conn.execute(_STATE, (schema,)).fetchone()
    assert row is not None
    return SchemaState(*row)


def installed_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's recorded version, 0 if it has none yet (or does not exist).

    Raises ``psycopg.errors.InsufficientPrivilege`` for a role without ``USAGE`` on the schema or
    ``SELECT`` on its ``meta`` table: the caller names the grants.
    """
    state = schema_state(conn, schema)
    if not state.has_meta:
        return 0
    if not state.usable:
        raise psycopg.errors.InsufficientPrivilege(f"permission denied for schema {schema}")
    query = sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'")
    row = conn.execute(query.format(sql.Identifier(schema))).fetchone()
    return 0 if row is None else int(row[0])


def check_newer(schema: str, version: int) -> None:
    """Refuse a schema a newer Relay made: this one would misread it."""
    if version > SCHEMA_VERSION:
        raise ConfigurationError(
            f"schema {schema!r} has version {version}, made by a newer Relay than this one "
            f"(version {SCHEMA_VERSION}); upgrade Relay or use another ?schema="
        )


def migrate(conn: psycopg.Connection[Any], schema: str, display: str, *, allowed: bool) -> int:
    """Bring ``schema`` to :data:`SCHEMA_VERSION` if this role may; the version found before.

    Decided under the advisory lock, so that of several instances starting at once one migrates
    and the others find the work done. ``allowed=False`` (``migrate=false`` in the URL) or a role
    that does not own the schema raises :class:`MigrationRequired` and issues no DDL; a privilege
    the migration still lacks half-way rolls the whole transaction back.
    """
    name = sql.Identifier(schema)
    try:
        with conn.transaction():
            conn.execute(_LOCK, (schema,))
            found = installed_version(conn, schema)
            check_newer(schema, found)
            if found == SCHEMA_VERSION:
                return found
            state = schema_state(conn, schema)
            if not (allowed and state.may_migrate):
                raise migration_required(schema, display, found, state, allowed)
            if not state.exists:  # IF NOT EXISTS would still need CREATE on the database
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
            conn.execute(sql.SQL(_META).format(schema=name))
            steps = [_SCHEMA] if found == 0 else [_MIGRATIONS[v] for v in _MIGRATIONS if v > found]
            for step in steps:
                conn.execute(sql.SQL(step).format(schema=name))
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.meta (key, value) VALUES ('schema_version', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ).format(name),
                (str(SCHEMA_VERSION),),
            )
            return found
    except psycopg.errors.InsufficientPrivilege as exc:
        raise MigrationRequired(
            f"could not migrate Relay's schema {schema!r} on {display}, and nothing was changed "
            f"({str(exc).strip().splitlines()[0]}): run `relay migrate --backend URL` as the "
            "schema's owner (a role with CREATE on the database while it does not exist)"
        ) from exc


def migration_required(
    schema: str, display: str, found: int, state: SchemaState, allowed: bool
) -> MigrationRequired:
    """The refusal of an instance that may not bring the schema to this Relay's version."""
    what = (
        "does not exist"
        if not state.exists
        else "holds no Relay tables"
        if found == 0
        else f"has version {found}, older than this Relay's {SCHEMA_VERSION}"
    )
    why = (
        "the URL says migrate=false"
        if not allowed
        else f"role {state.user!r} does not own it, so it may not "
        + ("create it" if not state.exists else "change it")
    )
    return MigrationRequired(
        f"Relay's schema {schema!r} on {display} {what}, and {why}; instances never change the "
        f"schema then: run `relay migrate --backend URL` once as the schema's owner "
        "(`manage.py relay_migrate` in Django), then start this instance again"
    )
