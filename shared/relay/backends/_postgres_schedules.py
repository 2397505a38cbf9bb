"""The PostgreSQL lease backend's stored schedules (:mod:`relay.schedule_store`), schema version 6.

Each change is one transaction (see :mod:`relay.backends._sql_schedules`); the server's clock
(``clock_timestamp()``) stamps it. Reads are single statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Any

import psycopg

from relay.backends._ms import ms
from relay.backends._sql_schedules import Connection, SQLSchedules
from relay.schedule_store import ScheduleWrite
from relay.stored import ScheduleChange, StoredRow

__all__ = ["VERSION", "PostgresSchedules"]

VERSION = 6
"""The schema version that holds stored schedules."""
_CLOCK = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"


class PostgresSchedules:
    """Mixed into :class:`~relay.backends.postgres.PostgresLeaseBackend`."""

    schema: str
    _version: int

    def _connection(self, jobs: int = 0) -> AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    @cached_property
    def _schedule_steps(self) -> SQLSchedules:
        schema = f'"{self.schema}"'  # checked: lower-case letters, digits and _ only
        bump = (
            f"UPDATE {schema}.meta SET value = (value::bigint + %s)::text "
            "WHERE key = 'schedule_revision' "
            "RETURNING value::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
        )

        def bumped(conn: Connection, count: int) -> tuple[int, int]:
            revision, now = conn.execute(bump, (count,)).fetchone()
            return int(revision), int(now)

        def clock(conn: Connection) -> int:
            return int(conn.execute(_CLOCK).fetchone()[0])

        return SQLSchedules(
            f"{schema}.schedules", f"{schema}.schedule_history", bumped, clock, param="%s"
        )

    def add_schedule(self, name: str, definition: str, changes: str, by: str) -> StoredRow:
        with self._connection() as conn, conn.transaction():
            return self._schedule_steps.add(conn, name, definition, changes, by)

    def update_schedule(
        self, name: str, definition: str, changes: str, by: str, version: int
    ) -> StoredRow | None:
        with self._connection() as conn, conn.transaction():
            return self._schedule_steps.change(conn, name, definition, changes, by, version)

    def remove_schedule(
        self, name: str, changes: str, by: str, version: int | None
    ) -> StoredRow | None:
        with self._connection() as conn, conn.transaction():
            return self._schedule_steps.change(conn, name, None, changes, by, version)

    def apply_schedules(self, writes: Sequence[ScheduleWrite], by: str) -> None:
        # Each change may take PER_JOB beyond the deadline, as a job decided at once does.
        with self._connection(len(writes)) as conn, conn.transaction():
            self._schedule_steps.batch(conn, writes, by)

    def stored_schedule(self, name: str) -> StoredRow | None:
        if self._version < VERSION:  # read-only on a schema no scheduler of this version opened
            return None
        with self._connection() as conn:
            return self._schedule_steps.get(conn, name)

    def stored_schedules(self) -> list[StoredRow]:
        if self._version < VERSION:
            return []
        with self._connection() as conn:
            return self._schedule_steps.all(conn)

    def schedule_history(self, name: str) -> list[ScheduleChange]:
        if self._version < VERSION:
            return []
        with self._connection() as conn:
            return self._schedule_steps.changes(conn, name)

    def prune_schedules(self, older_than: float, limit: int = 500) -> int:
        if self._version < VERSION:
            return 0
        with self._connection() as conn, conn.transaction():
            return self._schedule_steps.prune(conn, ms(older_than), limit)

    def schedule_changes(self, since: int, limit: int | None = None) -> list[StoredRow]:
        if self._version < VERSION:
            return []
        with self._connection() as conn:
            return self._schedule_steps.since(conn, since, limit)
