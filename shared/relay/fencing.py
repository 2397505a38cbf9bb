"""Fencing: make the resource a handler writes to refuse a writer whose lease is stale.

A fencing token only protects what checks it. These helpers store, next to each value, the token
that wrote it, and apply a write only if the stored token is not newer than the writer's: a runner
that was paused past its lease, and replaced, can no longer overwrite its successor's work.

* :class:`SQLFence` — one ``INSERT … ON CONFLICT … DO UPDATE … WHERE`` statement, for any DB-API
  connection to SQLite (3.24+) or PostgreSQL (9.5+).
* :func:`redis_fenced_set` — one short Lua script on a Redis hash.

A write refused inside a run reports :class:`~relay.events.FencedOff` (operation ``write``) on the
run's event bus. The run goes on: a newer token of the same job (a newer attempt, or a later run of
a job that allows overlap) wrote the key, which does not always mean this attempt lost its lease.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from relay.engine.running import fenced_write_refused
from relay.errors import ConfigurationError

__all__ = ["FENCED_SET_LUA", "SQLFence", "redis_fenced_set"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Connection(Protocol):
    def cursor(self) -> Any: ...

    def commit(self) -> None: ...


@dataclass
class SQLFence:
    """Fenced writes to a ``(key, token, value)`` table through a DB-API connection.

    ``placeholder`` is the driver's parameter marker: ``"?"`` for sqlite3, ``"%s"`` for psycopg.
    """

    connection: _Connection
    table: str = "relay_fenced"
    placeholder: str = "?"

    def __post_init__(self) -> None:
        if not _IDENTIFIER.match(self.table):
            raise ConfigurationError(
                f"table name {self.table!r} is not a plain SQL identifier: use letters, digits "
                "and underscores, starting with a letter, such as 'relay_fenced'"
            )

    @classmethod
    def sqlite(cls, path: str | Path, table: str = "relay_fenced") -> SQLFence:
        """A fence on a SQLite file, creating its table if needed."""
        fence = cls(sqlite3.connect(path, timeout=30), table=table)
        fence.create_table()
        return fence

    def create_table(self) -> None:
        """Create the fenced table if it does not exist."""
        cursor = self.connection.cursor()
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {self.table} "
            "(key TEXT PRIMARY KEY, token BIGINT NOT NULL, value TEXT)"
        )
        self.connection.commit()

    def write(self, key: str, token: int, value: str) -> bool:
        """Store ``value`` under ``key`` unless a newer token wrote it; ``True`` if applied.

        Equal tokens apply, so one runner may write the same key several times.
        """
        _check_token(token)
        p = self.placeholder
        cursor = self.connection.cursor()
        cursor.execute(
            f"INSERT INTO {self.table} (key, token, value) VALUES ({p}, {p}, {p}) "
            "ON CONFLICT (key) DO UPDATE SET token = excluded.token, value = excluded.value "
            f"WHERE {self.table}.token <= excluded.token",
            (key, token, value),
        )
        applied = bool(cursor.rowcount == 1)
        self.connection.commit()
        if not applied:
            fenced_write_refused(key, token)
        return applied

    def read(self, key: str) -> tuple[int, str] | None:
        """The token and value stored under ``key``, if any."""
        cursor = self.connection.cursor()
        cursor.execute(
            f"SELECT token, value FROM {self.table} WHERE key = {self.placeholder}", (key,)
        )
        row = cursor.fetchone()
        return None if row is None else (int(row[0]), str(row[1]))


FENCED_SET_LUA = """
local stored = tonumber(redis.call('HGET', KEYS[1], 'token'))
local token = tonumber(ARGV[1])
if stored and stored > token then
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
"""
"""Set ``value`` on the hash ``KEYS[1]`` unless its stored token is newer than ``ARGV[1]``."""


def redis_fenced_set(client: Any, key: str, token: int, value: str) -> bool:
    """Fenced write to a Redis hash ``key`` (fields ``token`` and ``value``); ``True`` if applied.

    ``client`` is a ``redis.Redis``; the script is cached on it and called by hash afterwards.
    """
    _check_token(token)
    script = getattr(client, "_relay_fenced_set", None)
    if script is None:
        script = client.register_script(FENCED_SET_LUA)
        client._relay_fenced_set = script
    applied = bool(script(keys=[key], args=[token, value]))
    if not applied:
        fenced_write_refused(key, token)
    return applied


def _check_token(token: object) -> None:
    """Refuse a token that is not a whole number: stores compare text and numbers differently."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise ConfigurationError(
            f"fencing token {token!r} must be the run's token, an int: pass run.token"
        )
