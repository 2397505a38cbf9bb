"""The Redis lease backend's stored schedules (:mod:`relay.schedule_store`).

One Lua script, ``redis_lease_schedules.lua``, makes each step atomic. Every key of the schedules
shares the hash tag ``{relay:schedules}`` (``<prefix>{relay:schedules}:rows``, ``:feed``, ``:rev``,
``:hist:<name>``): a change writes a row, its history and the store-wide revision in one script,
and on Redis Cluster a script may touch one slot only. The schedules therefore all live on one
node of a Cluster; they are few and small next to runs (100,000 schedules take tens of MB), and
an instance's idle tick reads one sorted set there. Runs keep their own per-job slots.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from relay.backends._ms import ms
from relay.errors import Conflict
from relay.runs import from_ms
from relay.schedule_store import ScheduleWrite, checked_write
from relay.stored import ScheduleChange, StoredRow

__all__ = ["SCHEDULES_TAG", "RedisSchedules"]

SCHEDULES_TAG = "{relay:schedules}:"
"""What follows the prefix in every key of the stored schedules."""
_CHANGES = ("add", "update", "remove", "prune", "batch")
PAGE = 1000
"""Rows one script call returns at most when reading the revision feed."""


class RedisSchedules:
    """Mixed into :class:`~relay.backends.redis_lease.RedisLeaseBackend`."""

    prefix: str

    def _call_many(
        self, step: str, calls: Any, before: tuple[Any, ...] | None = None, *, wait: bool = True
    ) -> list[Any]:
        raise NotImplementedError

    def _call_long(self, step: str, keys: list[str], args: list[Any], changes: int) -> Any:
        raise NotImplementedError

    def _schedules(self, *args: Any) -> Any:
        # A change is followed by WAIT when the URL asks for wait_replicas (a read is not).
        calls = [([self.prefix + SCHEDULES_TAG], list(args))]
        (reply,) = self._call_many("schedules", calls, wait=args[0] in _CHANGES)
        return reply

    def add_schedule(self, name: str, definition: str, changes: str, by: str) -> StoredRow:
        row = self._changed(name, self._schedules("add", name, definition, changes, by), None)
        assert row is not None
        return row

    def update_schedule(
        self, name: str, definition: str, changes: str, by: str, version: int
    ) -> StoredRow | None:
        reply = self._schedules("update", name, definition, changes, by, version)
        return self._changed(name, reply, version)

    def remove_schedule(
        self, name: str, changes: str, by: str, version: int | None
    ) -> StoredRow | None:
        reply = self._schedules("remove", name, changes, by, "" if version is None else version)
        return self._changed(name, reply, version)

    def apply_schedules(self, writes: Sequence[ScheduleWrite], by: str) -> None:
        if not writes:
            return
        batch = [[w.action, w.name, w.definition or "", w.changes, w.version or ""] for w in writes]
        # One script: Redis serves nobody else while it runs, about 20 µs a change.
        keys = [self.prefix + SCHEDULES_TAG]
        reply = self._call_long("schedules", keys, ["batch", json.dumps(batch), by], len(batch))
        if reply[0] == "refused":
            write = writes[int(reply[1]) - 1]
            checked_write(None if reply[2] is None else _row(reply[2]), write)
            raise AssertionError(f"the store refused {write} for no reason Relay knows")

    def stored_schedule(self, name: str) -> StoredRow | None:
        raw = self._schedules("get", name)
        row = None if raw is None else _row(raw)
        return None if row is None or row.definition is None else row

    def stored_schedules(self) -> list[StoredRow]:
        flat = self._schedules("all")
        rows = [_row(raw) for raw in flat[1::2]]
        return sorted((r for r in rows if r.definition is not None), key=lambda r: r.name)

    def schedule_history(self, name: str) -> list[ScheduleChange]:
        flat = self._schedules("history", name)
        entries = [json.loads(raw) for raw in flat[1::2]]
        return [
            ScheduleChange(
                name,
                int(e["version"]),
                from_ms(int(e["at_ms"])),
                e["by"],
                e["action"],
                json.loads(e["changes"]),
            )
            for e in sorted(entries, key=lambda e: int(e["version"]))
        ]

    def prune_schedules(self, older_than: float, limit: int = 500) -> int:
        return int(self._schedules("prune", ms(older_than), limit))

    def schedule_changes(self, since: int, limit: int | None = None) -> list[StoredRow]:
        found: list[StoredRow] = []
        while True:
            size = PAGE if limit is None else min(PAGE, limit - len(found))
            page = [_row(raw) for raw in self._schedules("since", since, size) if raw]
            found += page
            if len(page) < size or len(found) == limit:
                return found
            since = page[-1].revision

    @staticmethod
    def _changed(name: str, reply: list[Any], expected: int | None) -> StoredRow | None:
        if reply[0] == "missing":
            return None
        row = _row(reply[1])
        if reply[0] == "conflict":
            raise Conflict(name, version=row.version, at=row.updated_at, by=row.updated_by,
                           expected=expected)  # fmt: skip
        return row


def _row(raw: str) -> StoredRow:
    fields = json.loads(raw)
    return StoredRow(
        fields["name"], None if fields["removed"] else fields["definition"],
        int(fields["version"]), int(fields["revision"]), from_ms(int(fields["updated_ms"])),
        fields["updated_by"], from_ms(int(fields["created_ms"])),
    )  # fmt: skip
