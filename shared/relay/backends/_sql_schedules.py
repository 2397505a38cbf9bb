"""Stored schedules on SQL stores (SQLite, PostgreSQL): the steps of :mod:`relay.schedule_store`.

Each change runs in one transaction of the caller's, which this module fills:

1. bump the store-wide revision (one row of the store's meta table). On PostgreSQL the row lock
   orders every schedule change, so a change's read below sees every change committed before it
   and revisions commit in order (a sequence would not: a lower number may commit after a higher
   one is read, and a reader would skip it). SQLite's write lock does the same;
2. read the schedule's row and check its version (``Conflict`` rolls the transaction back);
3. write the row and its history entry.

A row is one schedule; a removed schedule keeps its row with no definition. Times are milliseconds
on the store's clock, read in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from relay.errors import Conflict
from relay.runs import from_ms
from relay.schedule_store import ScheduleWrite, checked_write
from relay.stored import ScheduleChange, StoredRow

__all__ = ["Connection", "SQLSchedules"]

_ROW = "name, definition, version, revision, updated_ms, updated_by, created_ms"
_UPDATE = (
    "UPDATE {s} SET definition = ?, version = ?, revision = ?, updated_ms = ?, "
    "updated_by = ?, created_ms = coalesce(?, created_ms) WHERE name = ?"
)
_LOG = "INSERT INTO {h} (name, version, at_ms, by_whom, action, changes) VALUES (?, ?, ?, ?, ?, ?)"


class Connection(Protocol):
    """What both drivers' connections offer: ``execute`` returning a cursor."""

    def execute(self, query: Any, params: Any = ..., /) -> Any:
        """Run one statement."""
        ...

    def cursor(self) -> Any:
        """A cursor, whose ``executemany`` runs one statement for many rows."""
        ...


@dataclass(frozen=True)
class SQLSchedules:
    """The statements of one SQL store; each step runs inside the caller's transaction."""

    schedules: str
    """The table of schedules (quoted and schema-qualified as the store needs)."""
    history: str
    """The table of changes."""
    bump: Callable[[Connection, int], tuple[int, int]]
    """Bump the store's revision by a count; return it and the store's clock in milliseconds."""
    clock: Callable[[Connection], int]
    """The store's clock in milliseconds."""
    param: str = "?"

    def _q(self, text: str) -> str:
        return text.format(s=self.schedules, h=self.history).replace("?", self.param)

    def add(self, conn: Connection, name: str, definition: str, changes: str, by: str) -> StoredRow:
        """Store a new schedule (or a removed one's next version); ``Conflict`` if it exists."""
        revision, now = self.bump(conn, 1)
        current = self.get(conn, name, removed=True)
        if current is not None and current.definition is not None:
            raise Conflict(name, version=current.version, at=current.updated_at,
                           by=current.updated_by)  # fmt: skip
        version = 1 if current is None else current.version + 1
        if current is None:
            conn.execute(
                self._q(f"INSERT INTO {{s}} ({_ROW}) VALUES (?, ?, ?, ?, ?, ?, ?)"),
                (name, definition, version, revision, now, by, now),
            )
        else:
            self._write(conn, name, definition, version, revision, now, by, created=now)
        self._log(conn, name, version, now, by, "add", changes)
        return StoredRow(name, definition, version, revision, from_ms(now), by, from_ms(now))

    def change(
        self,
        conn: Connection,
        name: str,
        definition: str | None,
        changes: str,
        by: str,
        version: int | None,
    ) -> StoredRow | None:
        """Update (``definition``) or remove (``None``) schedule ``name`` at ``version``."""
        revision, now = self.bump(conn, 1)
        current = self.get(conn, name, removed=False)
        if current is None:
            return None
        if version is not None and version != current.version:
            raise Conflict(name, version=current.version, at=current.updated_at,
                           by=current.updated_by, expected=version)  # fmt: skip
        new = current.version + 1
        self._write(conn, name, definition, new, revision, now, by)
        self._log(conn, name, new, now, by, "update" if definition else "remove", changes)
        return StoredRow(name, definition, new, revision, from_ms(now), by, current.created_at)

    def batch(self, conn: Connection, writes: Sequence[ScheduleWrite], by: str) -> None:
        """Check every write against the rows (one read), then make them all (three statements
        run for many rows): ``Conflict`` or ``UnknownSchedule`` before any write."""
        if not writes:
            return
        top, now = self.bump(conn, len(writes))
        rows = conn.execute(self._q(f"SELECT {_ROW} FROM {{s}}")).fetchall()
        current = {found.name: found for found in map(_row, rows)}
        inserts, updates, history = [], [], []
        for revision, write in enumerate(writes, start=top - len(writes) + 1):
            row = checked_write(current.get(write.name), write)
            version = 1 if row is None else row.version + 1
            if row is None:
                inserts.append((write.name, write.definition, version, revision, now, by, now))
            else:
                created = now if write.action == "add" else None
                updates.append((write.definition, version, revision, now, by, created, write.name))
            history.append((write.name, version, now, by, write.action, write.changes))
        cursor = conn.cursor()
        if inserts:
            cursor.executemany(
                self._q(f"INSERT INTO {{s}} ({_ROW}) VALUES (?, ?, ?, ?, ?, ?, ?)"), inserts
            )
        if updates:
            cursor.executemany(self._q(_UPDATE), updates)
        cursor.executemany(self._q(_LOG), history)

    def get(self, conn: Connection, name: str, *, removed: bool = False) -> StoredRow | None:
        """The row of ``name`` (a removed one only if ``removed``)."""
        row = conn.execute(self._q(f"SELECT {_ROW} FROM {{s}} WHERE name = ?"), (name,)).fetchone()
        found = None if row is None else _row(row)
        if found is not None and found.definition is None and not removed:
            return None
        return found

    def all(self, conn: Connection) -> list[StoredRow]:
        """Every schedule not removed, by name."""
        rows = conn.execute(
            self._q(f"SELECT {_ROW} FROM {{s}} WHERE definition IS NOT NULL ORDER BY name")
        ).fetchall()
        return [_row(row) for row in rows]

    def since(self, conn: Connection, revision: int, limit: int | None) -> list[StoredRow]:
        """Rows changed after ``revision``, by revision (one index range: none when idle)."""
        rows = conn.execute(
            self._q(f"SELECT {_ROW} FROM {{s}} WHERE revision > ? ORDER BY revision LIMIT ?"),
            (revision, -1 if limit is None and self.param == "?" else limit),
        ).fetchall()
        return [_row(row) for row in rows]

    def changes(self, conn: Connection, name: str) -> list[ScheduleChange]:
        """The history of ``name``, oldest first."""
        rows = conn.execute(
            self._q(
                "SELECT version, at_ms, by_whom, action, changes FROM {h} WHERE name = ? "
                "ORDER BY version"
            ),
            (name,),
        ).fetchall()
        return [
            ScheduleChange(name, version, from_ms(at), by, action, json.loads(changes))
            for version, at, by, action, changes in rows
        ]

    def prune(self, conn: Connection, older_than_ms: int, limit: int) -> int:
        """Delete up to ``limit`` schedules removed more than ``older_than_ms`` ago, with their
        history. When there are any, the revision's lock (bumped; an unused revision is
        harmless) orders the deletes with the changes, and the schedules are read again under
        it: one being added again is never half-deleted."""
        cutoff = self.clock(conn) - older_than_ms
        if not self._removed_before(conn, cutoff, 1):
            return 0  # the usual prune: one indexed read, no write
        self.bump(conn, 1)
        names = self._removed_before(conn, cutoff, limit)
        for name in names:
            conn.execute(self._q("DELETE FROM {h} WHERE name = ?"), (name,))
            conn.execute(self._q("DELETE FROM {s} WHERE name = ?"), (name,))
        return len(names)

    def _removed_before(self, conn: Connection, cutoff: int, limit: int) -> list[str]:
        rows = conn.execute(
            self._q(
                "SELECT name FROM {s} WHERE definition IS NULL AND updated_ms < ? "
                "ORDER BY updated_ms LIMIT ?"
            ),
            (cutoff, limit),
        ).fetchall()
        return [name for (name,) in rows]

    def _write(
        self,
        conn: Connection,
        name: str,
        definition: str | None,
        version: int,
        revision: int,
        now: int,
        by: str,
        created: int | None = None,
    ) -> None:
        conn.execute(self._q(_UPDATE), (definition, version, revision, now, by, created, name))

    def _log(
        self, conn: Connection, name: str, version: int, now: int, by: str, action: str, text: str
    ) -> None:
        conn.execute(self._q(_LOG), (name, version, now, by, action, text))


def _row(row: Any) -> StoredRow:
    name, definition, version, revision, updated, by, created = row
    return StoredRow(
        name, definition, int(version), int(revision), from_ms(int(updated)), by,
        from_ms(int(created)),
    )  # fmt: skip
