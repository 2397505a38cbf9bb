"""Relay's PostgreSQL schema: its version, who may create or upgrade it, and the migration.

The schema's owner (a member of the role that owns it, or a role with ``CREATE`` on the database
while the schema does not exist yet) migrates it, on first use or with ``relay migrate``. Any
other role only reads the version: it never issues DDL, and a schema missing or older than this
Relay needs raises :class:`~relay.errors.MigrationRequired` naming ``relay migrate``. A migration
runs in one transaction under an advisory lock, so a refusal half-way leaves nothing behind.

A fresh install runs ``postgres_schema.sql``, the schema as it is today; an install at version k
runs ``postgres_migrations/`` k+1 to :data:`SCHEMA_VERSION`, one file per version.
``tests/backends/test_postgres_schema.py`` holds both paths to the same catalog.

Migrations only add (see :mod:`relay.layout`): the table ``layout`` records the layout and the
oldest Relay that can use it, and ``meta``'s ``schema_version`` keeps Relay 0.1's number while
Relay 0.1 may still use the schema. :func:`contract` raises that floor.
``tests/backends/test_postgres_layout.py`` checks that each migration after the floor's layout
keeps every table, column, type and function signature the floor's Relay uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from relay.errors import MigrationRequired, StoreTooOld
from relay.layout import CONTRACT_FLOOR, FLOOR, Layout, legacy_version, unrecorded, version_key

__all__ = [
    "CONTRACTIONS",
    "LEGACY_VERSION",
    "SCHEMA_VERSION",
    "SchemaState",
    "check_newer",
    "contract",
    "grants",
    "installed_version",
    "migrate",
    "migration_required",
    "migrations_after",
    "read_layout",
    "record_layout",
    "schema_state",
    "sections",
]

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('relay.schema'), hashtext(%s))"
_META = "CREATE TABLE IF NOT EXISTS {schema}.meta (key text PRIMARY KEY, value text NOT NULL)"
# One row: the layout, its floor, and the schema_version written beside them in meta (a meta
# that says otherwise was changed by a Relay that knows nothing of this table: meta wins).
_LAYOUT = (
    "CREATE TABLE IF NOT EXISTS {schema}.layout (id boolean PRIMARY KEY DEFAULT true CHECK (id), "
    "layout integer NOT NULL, min_relay text NOT NULL, schema_version integer NOT NULL)"
)
_SET_LAYOUT = (
    "INSERT INTO {schema}.layout (layout, min_relay, schema_version) VALUES (%s, %s, %s) "
    "ON CONFLICT (id) DO UPDATE SET layout = excluded.layout, min_relay = excluded.min_relay, "
    "schema_version = excluded.schema_version"
)
_SET_VERSION = (
    "INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', %s) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
# One round trip: does the schema exist, may we use it, may we change it.
_STATE = """
SELECT n.oid IS NOT NULL, coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
       CASE WHEN n.oid IS NULL THEN has_database_privilege(current_database(), 'CREATE')
            ELSE pg_has_role(n.nspowner, 'USAGE') END,
       current_user,
       EXISTS (SELECT 1 FROM pg_class AS c WHERE c.relnamespace = n.oid AND c.relname = 'meta')
FROM (SELECT 1) AS one LEFT JOIN pg_namespace AS n ON n.nspname = %s
"""


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
LEGACY_VERSION = 16
"""Relay 0.1's schema version: what ``meta`` says while Relay 0.1 may still use the schema."""
CONTRACTIONS: tuple[str, ...] = ()
"""What ``relay migrate --contract`` removes (statements formatted with ``{schema}``): what only
Relays older than :data:`~relay.layout.CONTRACT_FLOOR` used. Nothing in this release."""


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


def read_layout(conn: psycopg.Connection[Any], schema: str) -> Layout:
    """The schema's layout record (layout 0: no Relay schema yet).

    Without a ``layout`` row (a schema Relay 0.1 made or migrated), the layout is ``meta``'s
    schema version and the floor Relay 0.1; a version above this Relay's without a row came from
    a Relay that recorded no floor, and is taken to need the next release.
    """
    version = installed_version(conn, schema)
    name = sql.Identifier(schema)
    if version and conn.execute("SELECT to_regclass(%s)", (f"{schema}.layout",)).fetchone() != (
        None,
    ):
        query = sql.SQL("SELECT layout, min_relay, schema_version FROM {}.layout").format(name)
        row = conn.execute(query).fetchone()
        if row is not None and row[2] == version:
            return Layout(int(row[0]), str(row[1]))
    return unrecorded(version, SCHEMA_VERSION)


def check_newer(schema: str, version: int | Layout) -> None:
    """Refuse a schema whose floor is a newer Relay than this one: it would misread it.

    A layout newer than :data:`SCHEMA_VERSION` whose floor this Relay meets is used as it is.
    """
    layout = version if isinstance(version, Layout) else unrecorded(version, SCHEMA_VERSION)
    layout.check(f"schema {schema!r}")


def migrations_after(layout: int) -> list[str]:
    """The migrations that bring ``layout`` to :data:`SCHEMA_VERSION`, each as its file name and
    the first sentence of its header (what it changes): ``relay migrate --plan`` lists them."""
    folder = resources.files("relay.backends").joinpath("postgres_migrations")
    names = {int(f.name[:4]): f.name for f in folder.iterdir() if f.name.endswith(".sql")}
    return [f"{names[v]}: {_header(_MIGRATIONS[v])}" for v in sorted(names) if v > layout]


def _header(text: str) -> str:
    """The first sentence of a migration's leading comment."""
    words = []
    for line in text.lstrip().splitlines():
        if not line.startswith("--"):
            break
        words.append(line.lstrip("- ").strip())
    sentence = " ".join(words).split(". ")[0].split("; ")[0]
    return sentence.rstrip(".")


def contract(conn: psycopg.Connection[Any], schema: str) -> tuple[Layout, list[str]]:
    """Remove what :data:`CONTRACTIONS` lists and raise the floor to
    :data:`~relay.layout.CONTRACT_FLOOR`, in one transaction under the schema's lock; the layout
    found before and the statements run. The caller checked the live instances first."""
    name = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(_LOCK, (schema,))
        found = read_layout(conn, schema)
        found.check(f"schema {schema!r}")
        if found.layout < SCHEMA_VERSION:
            raise StoreTooOld(
                f"schema {schema!r} is at layout {found.layout}, older than this Relay's "
                f"{SCHEMA_VERSION}: run `relay migrate --backend URL` before `--contract`"
            )
        for statement in CONTRACTIONS:
            conn.execute(sql.SQL(statement).format(schema=name))
        _record_layout(conn, name, max(found.layout, SCHEMA_VERSION), CONTRACT_FLOOR)
    return found, list(CONTRACTIONS)


def record_layout(conn: psycopg.Connection[Any], schema: str, layout: Layout) -> None:
    """Write ``layout`` as the schema's record (in the caller's transaction)."""
    _record_layout(conn, sql.Identifier(schema), layout.layout, layout.min_relay)


def _record_layout(
    conn: psycopg.Connection[Any], name: sql.Identifier, layout: int, floor: str
) -> None:
    """Write the layout row and ``meta``'s schema version that goes with it."""
    legacy = legacy_version(layout, LEGACY_VERSION, floor)
    conn.execute(sql.SQL(_LAYOUT).format(schema=name))
    conn.execute(sql.SQL(_SET_LAYOUT).format(schema=name), (layout, floor, legacy))
    conn.execute(sql.SQL(_SET_VERSION).format(schema=name), (str(legacy),))


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
            layout = read_layout(conn, schema)
            found = layout.layout
            check_newer(schema, layout)
            if found >= SCHEMA_VERSION:  # a newer Relay's layout whose floor we meet: used as is
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
            floor = max(FLOOR, layout.min_relay, key=version_key)  # a floor is never lowered
            _record_layout(conn, name, SCHEMA_VERSION, floor)
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
    refusal = StoreTooOld if state.exists and found else MigrationRequired
    return refusal(
        f"Relay's schema {schema!r} on {display} {what}, and {why}; instances never change the "
        f"schema then: run `relay migrate --backend URL` once as the schema's owner "
        "(`manage.py relay_migrate` in Django), then start this instance again"
    )
