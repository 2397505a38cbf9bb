"""The SQLite lease backend's stored schedules (:mod:`relay.schedule_store`), schema version 6.

Each step is one ``BEGIN IMMEDIATE`` transaction of the backend: SQLite's write lock orders the
changes, and the host's clock (the backend's) stamps them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import cached_property

from relay.backends._ms import ms
from relay.backends._sql_schedules import Connection, SQLSchedules
from relay.schedule_store import ScheduleWrite
from relay.stored import ScheduleChange, StoredRow

__all__ = ["MIGRATION", "SQLiteSchedules"]

MIGRATION = (
    "CREATE TABLE IF NOT EXISTS relay_schedules (name TEXT PRIMARY KEY, definition TEXT, "
    "version INTEGER NOT NULL, revision INTEGER NOT NULL, updated_ms INTEGER NOT NULL, "
    "updated_by TEXT NOT NULL, created_ms INTEGER NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS relay_schedules_revision ON relay_schedules (revision)",
    "CREATE TABLE IF NOT EXISTS relay_schedule_history (name TEXT NOT NULL, "
    "version INTEGER NOT NULL, at_ms INTEGER NOT NULL, by_whom TEXT NOT NULL, "
    "action TEXT NOT NULL, changes TEXT NOT NULL, PRIMARY KEY (name, version)) WITHOUT ROWID",
    "INSERT OR IGNORE INTO relay_meta (key, value) VALUES ('schedule_revision', '0')",
    "ALTER TABLE relay_instances ADD COLUMN tasks TEXT",
)
"""Version 6: stored schedules, their history, the store's revision, instances' allowed tasks."""
VERSION = 6
_BUMP = (
    "UPDATE relay_meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'schedule_revision' "
    "RETURNING CAST(value AS INTEGER)"
)


class SQLiteSchedules:
    """Mixed into :class:`~relay.backends.sqlite.SQLiteLeaseBackend`."""

    _version: int

    def _write(
        self, *, durable: bool = True
    ) -> AbstractContextManager[tuple[sqlite3.Connection, int]]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _now_ms(self) -> int:
        raise NotImplementedError

    @cached_property
    def _schedule_steps(self) -> SQLSchedules:
        def bump(conn: Connection, count: int) -> tuple[int, int]:
            return int(conn.execute(_BUMP, (count,)).fetchone()[0]), self._now_ms()

        return SQLSchedules(
            "relay_schedules", "relay_schedule_history", bump, lambda _: self._now_ms()
        )

    def add_schedule(self, name: str, definition: str, changes: str, by: str) -> StoredRow:
        with self._write() as (conn, _):
            return self._schedule_steps.add(conn, name, definition, changes, by)

    def update_schedule(
        self, name: str, definition: str, changes: str, by: str, version: int
    ) -> StoredRow | None:
        with self._write() as (conn, _):
            return self._schedule_steps.change(conn, name, definition, changes, by, version)

    def remove_schedule(
        self, name: str, changes: str, by: str, version: int | None
    ) -> StoredRow | None:
        with self._write() as (conn, _):
            return self._schedule_steps.change(conn, name, None, changes, by, version)

    def apply_schedules(self, writes: Sequence[ScheduleWrite], by: str) -> None:
        with self._write() as (conn, _):
            self._schedule_steps.batch(conn, writes, by)

    def stored_schedule(self, name: str) -> StoredRow | None:
        with self._reading() as conn:
            return None if conn is None else self._schedule_steps.get(conn, name)

    def stored_schedules(self) -> list[StoredRow]:
        with self._reading() as conn:
            return [] if conn is None else self._schedule_steps.all(conn)

    def schedule_history(self, name: str) -> list[ScheduleChange]:
        with self._reading() as conn:
            return [] if conn is None else self._schedule_steps.changes(conn, name)

    def schedule_changes(self, since: int, limit: int | None = None) -> list[StoredRow]:
        with self._reading() as conn:
            return [] if conn is None else self._schedule_steps.since(conn, since, limit)

    def prune_schedules(self, older_than: float, limit: int = 500) -> int:
        if self._version < VERSION:  # read-only on a file with no schedules yet
            return 0
        with self._write() as (conn, _):
            return self._schedule_steps.prune(conn, ms(older_than), limit)

    def _reading(self) -> AbstractContextManager[sqlite3.Connection | None]:
        """A read; ``None`` on a file (opened read-only) that has no schedules yet."""
        return _nothing() if self._version < VERSION else self._read()


class _nothing(AbstractContextManager[None]):
    def __exit__(self, *exc: object) -> None:
        return None
