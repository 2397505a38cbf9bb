"""The SQLite store's layout record (see :mod:`relay.layout`): the table ``relay_layout``, and
``relay_meta``'s schema version kept at Relay 0.1's number while Relay 0.1 may use the file."""

from __future__ import annotations

import sqlite3

from relay.layout import Layout, legacy_version, unrecorded

__all__ = ["LEGACY_VERSION", "read_layout", "record_layout"]

LEGACY_VERSION = 7
"""Relay 0.1's SQLite schema version."""
_TABLE = (
    "CREATE TABLE IF NOT EXISTS relay_layout (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "layout INTEGER NOT NULL, min_relay TEXT NOT NULL, schema_version INTEGER NOT NULL)"
)


def read_layout(conn: sqlite3.Connection, version: int, own: int) -> Layout:
    """The file's layout record, given ``relay_meta``'s schema ``version`` and this Relay's
    (``own``). A row written beside another schema version than meta's is ignored: meta was
    changed by a Relay that knows nothing of it."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'relay_layout'").fetchone()
    if exists is not None:
        row = conn.execute("SELECT layout, min_relay, schema_version FROM relay_layout").fetchone()
        if row is not None and row[2] == version:
            return Layout(int(row[0]), str(row[1]))
    return unrecorded(version, own)


def record_layout(conn: sqlite3.Connection, layout: int, floor: str) -> None:
    """Write the layout row and ``relay_meta``'s schema version that goes with it."""
    legacy = legacy_version(layout, LEGACY_VERSION, floor)
    conn.execute(_TABLE)
    conn.execute(
        "INSERT OR REPLACE INTO relay_layout (id, layout, min_relay, schema_version) "
        "VALUES (1, ?, ?, ?)",
        (layout, floor, legacy),
    )
    conn.execute("UPDATE relay_meta SET value = ? WHERE key = 'schema_version'", (str(legacy),))
