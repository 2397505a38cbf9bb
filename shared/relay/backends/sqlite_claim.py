"""SQLite claim backend (``sqlite:///claims.db?strategy=claim``): one winner per run, on one host.

It exists for trying claim mode without a server and to exercise the claim contract; for
production claims use Redis, RabbitMQ or NATS, and for anything more a lease backend.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from relay.backends._sqlite_connection import SharedConnection
from relay.backends._url import BackendURL
from relay.backends.sqlite import open_wal
from relay.errors import BackendUnavailable, ConfigurationError
from relay.runs import run_id

__all__ = ["SQLiteClaimBackend"]


class SQLiteClaimBackend:
    """Claims as rows of one table: the ``INSERT`` that does not conflict wins."""

    capability: Literal["claim"] = "claim"

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        try:
            self._shared = SharedConnection(lambda: open_wal(self.path, busy_timeout))
            with self._shared.lock:
                self._shared.get().execute(
                    "CREATE TABLE IF NOT EXISTS relay_claims (run_id TEXT PRIMARY KEY, job TEXT)"
                )
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open SQLite database {self.path}: {exc}") from exc

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SQLiteClaimBackend:
        """Open the database a ``sqlite:///…?strategy=claim`` URL names."""
        parsed = BackendURL(url)
        parsed.check_options(["strategy", "busy_timeout"], "the SQLite claim backend")
        path = parsed.parts.path[1:]
        if parsed.parts.netloc or not path:
            raise ConfigurationError(
                f"SQLite URL {parsed.redacted()!r} must look like sqlite:///claims.db"
            )
        return cls(path, busy_timeout=parsed.float_option("busy_timeout", 30.0), **kwargs)

    @classmethod
    def name_for(cls, url: str) -> str:
        """The :attr:`name` of the backend ``url`` opens, without opening it (a deferred one's)."""
        return f"SQLite claims ({Path(BackendURL(url).parts.path[1:])})"

    @property
    def name(self) -> str:
        return f"SQLite claims ({self.path})"

    @property
    def remembers_for(self) -> float | None:
        return None

    def claim(self, job: str, slot: datetime) -> bool:
        return self.claim_many([(job, slot)])[0]

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        rows = [(run_id(job, slot), job) for job, slot in runs]  # bad input fails before BEGIN
        with self._shared.lock:
            conn: sqlite3.Connection | None = None
            try:
                conn = self._shared.get()
                conn.execute("BEGIN IMMEDIATE")
                won = [
                    conn.execute(
                        "INSERT INTO relay_claims (run_id, job) VALUES (?, ?) "
                        "ON CONFLICT (run_id) DO NOTHING",
                        row,
                    ).rowcount
                    == 1
                    for row in rows
                ]
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn is not None and conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise BackendUnavailable(f"SQLite {self.path} is unavailable: {exc}") from exc
        return won

    def close(self) -> None:
        self._shared.close()
