"""The PostgreSQL schema's two paths end in the same place.

A fresh install runs ``postgres_schema.sql``; an install at version k runs the migrations after k.
Each test installs version k the way a Relay of that version left it (migrations 1 to k), upgrades
it, and compares the catalog with a fresh install's: tables and columns, indexes, constraints,
domains, functions (whole definitions, bodies included), triggers and the meta rows. A change made
to one file and not the other fails here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from importlib import resources

import psycopg
import pytest
from psycopg import sql

from relay.backends._postgres_schema import (
    _MIGRATIONS,
    LEGACY_VERSION,
    SCHEMA_VERSION,
    migrate,
    read_layout,
)
from tests.support.backends import unique
from tests.support.services import SERVICES

pytestmark = pytest.mark.postgres

Conn = psycopg.Connection[tuple[object, ...]]
Catalog = dict[str, list[tuple[object, ...]]]

# Each query reads one kind of object in schema %(s)s, in an order that does not depend on OIDs.
_CATALOG = {
    "columns": """
        SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), co.collname
        FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef AS d ON d.adrelid = c.oid AND d.adnum = a.attnum
        LEFT JOIN pg_collation AS co ON co.oid = a.attcollation AND a.attcollation <> 0
        WHERE n.nspname = %(s)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        ORDER BY c.relname, a.attnum""",
    "relations": """
        SELECT c.relname, c.relkind FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(s)s ORDER BY c.relname""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s ORDER BY indexname""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint AS k
        JOIN pg_class AS c ON c.oid = k.conrelid
        JOIN pg_namespace AS n ON n.oid = k.connamespace
        WHERE n.nspname = %(s)s ORDER BY c.relname, k.conname""",
    "domains": """
        SELECT t.typname, format_type(t.typbasetype, t.typtypmod), t.typnotnull, k.conname,
               pg_get_constraintdef(k.oid)
        FROM pg_type AS t
        JOIN pg_namespace AS n ON n.oid = t.typnamespace
        LEFT JOIN pg_constraint AS k ON k.contypid = t.oid
        WHERE n.nspname = %(s)s AND t.typtype = 'd' ORDER BY t.typname, k.conname""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
        FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname = %(s)s ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger AS t
        JOIN pg_class AS c ON c.oid = t.tgrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(s)s AND NOT t.tgisinternal ORDER BY 1, 2""",
}


@pytest.fixture
def conn() -> Iterator[Conn]:
    """An autocommit connection to the test server."""
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as opened:
        yield opened


@pytest.fixture
def new_schema(conn: Conn) -> Iterator[Callable[[], str]]:
    """Names no other test uses, for schemas dropped afterwards."""
    made: list[str] = []

    def name() -> str:
        made.append(unique())
        return made[-1]

    yield name
    for schema in made:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def catalog(conn: Conn, schema: str) -> Catalog:
    """What ``schema`` holds, with its name written ``{schema}`` wherever it appears."""

    def plain(value: object) -> object:
        if not isinstance(value, str):
            return value
        return re.sub(rf'"{schema}"|\b{schema}\b', "{schema}", value)

    found = {
        kind: [tuple(plain(v) for v in row) for row in conn.execute(query, {"s": schema})]
        for kind, query in _CATALOG.items()
    }
    meta = sql.SQL("SELECT key, value FROM {}.meta ORDER BY key").format(sql.Identifier(schema))
    found["meta"] = list(conn.execute(meta))
    return found


def fresh(conn: Conn, schema: str) -> str:
    """``schema`` created the way a new install creates it."""
    assert migrate(conn, schema, "the test server", allowed=True) == 0
    return schema


def upgraded_from(conn: Conn, schema: str, version: int) -> str:
    """``schema`` left at ``version`` by migrations 1 to ``version``, then upgraded as today."""
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
    assert migrate(conn, schema, "the test server", allowed=True) == version
    return schema


def test_the_migrations_are_numbered_one_file_a_version() -> None:
    folder = resources.files("relay.backends").joinpath("postgres_migrations")
    names = sorted(f.name for f in folder.iterdir() if f.name.endswith(".sql"))
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", name) for name in names), names
    assert [int(name[:4]) for name in names] == list(range(1, SCHEMA_VERSION + 1))
    assert list(_MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))


def test_a_fresh_install_is_at_this_relays_version(
    conn: Conn, new_schema: Callable[[], str]
) -> None:
    schema = fresh(conn, new_schema())
    found = catalog(conn, schema)
    assert ("schema_version", str(LEGACY_VERSION)) in found["meta"]  # what Relay 0.1 reads
    assert read_layout(conn, schema).layout == SCHEMA_VERSION
    assert {"jobs", "runs", "meta", "instances", "schedules"} <= {r[0] for r in found["relations"]}
    assert {r[0] for r in found["functions"]} == {
        "acquire_many", "acquire_one", "finish", "floor_token", "heartbeat", "next_token", "skip",
        "start",
    }  # fmt: skip


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_an_upgraded_install_has_the_catalog_of_a_fresh_one(
    conn: Conn, new_schema: Callable[[], str], version: int
) -> None:
    expected = catalog(conn, fresh(conn, new_schema()))
    found = catalog(conn, upgraded_from(conn, new_schema(), version))
    for kind in expected:
        assert found[kind] == expected[kind], f"{kind} differ after upgrading from {version}"
