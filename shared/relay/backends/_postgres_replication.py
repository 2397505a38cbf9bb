"""What a PostgreSQL primary's replication can lose, read from the server's own settings.

A commit waits for a standby only when ``synchronous_standby_names`` names one and the session's
``synchronous_commit`` is ``on``, ``remote_write`` or ``remote_apply``. Otherwise a standby
promoted after the primary died may lack the last commits: a run leased or finished there can run
again. :func:`replication_facts` reads the facts (``relay doctor`` shows them too) and
:func:`check_replication` turns them into a refusal (``require_sync=1``) or one warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from relay.errors import ConfigurationError

__all__ = ["ReplicationFacts", "check_replication", "replication_facts"]

log = logging.getLogger("relay.backends.postgres")

_WAITING_LEVELS = ("on", "remote_write", "remote_apply")
_FACTS = (
    "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit'), "
    "pg_is_in_recovery()"
)
_STANDBYS = "SELECT coalesce(application_name, ''), sync_state FROM pg_stat_replication"
_SETTINGS_FIX = (
    "set synchronous_standby_names (such as 'ANY 1 (*)' or your standbys' application_name) and "
    "synchronous_commit = on (the default) on the server, then reload it"
)


@dataclass(frozen=True)
class ReplicationFacts:
    """A PostgreSQL server's replication as one session sees it."""

    synchronous_standby_names: str
    """The server setting; empty: no commit waits for a standby."""
    synchronous_commit: str
    """The session's setting (``on``, ``remote_apply``, ``remote_write``, ``local``, ``off``)."""
    in_recovery: bool
    """Whether the server is itself a standby (read-only)."""
    standbys: tuple[tuple[str, str | None], ...]
    """``(application_name, sync_state)`` of each connected standby, from ``pg_stat_replication``
    (``sync_state`` is ``None`` where the user may not read it: grant it ``pg_monitor``)."""

    @property
    def commits_wait(self) -> bool:
        """Whether a commit returns only once a standby has it."""
        return bool(self.synchronous_standby_names.strip()) and (
            self.synchronous_commit in _WAITING_LEVELS
        )

    @property
    def sync_standbys(self) -> int:
        """How many connected standbys a commit waits for now (``sync`` or ``quorum``)."""
        return sum(1 for _, state in self.standbys if state in ("sync", "quorum"))

    def describe(self) -> str:
        """The facts in one line, for messages."""
        states = ", ".join(f"{name or '?'} ({state or 'unknown'})" for name, state in self.standbys)
        return (
            f"synchronous_standby_names = {self.synchronous_standby_names!r}, "
            f"synchronous_commit = {self.synchronous_commit!r}, "
            f"standbys connected: {states or 'none'}"
        )


def replication_facts(conn: psycopg.Connection[Any]) -> ReplicationFacts:
    """Read the replication settings and the connected standbys over ``conn`` (two queries)."""
    row = conn.execute(_FACTS).fetchone()
    assert row is not None
    names, level, in_recovery = row
    standbys = tuple((name, state) for name, state in conn.execute(_STANDBYS).fetchall())
    return ReplicationFacts(names, level, bool(in_recovery), standbys)


def check_replication(facts: ReplicationFacts, *, require_sync: bool, display: str) -> None:
    """Refuse (``require_sync``) or warn once about a primary whose commits do not wait for a
    standby; say nothing about a server without standbys that nobody asked to replicate."""
    if facts.commits_wait:
        unknown = any(state is None for _, state in facts.standbys)  # not ours to read
        if require_sync and not facts.sync_standbys and not unknown:
            log.warning(
                "PostgreSQL at %s waits for a synchronous standby but none is connected now "
                "(%s): every commit waits until one connects",
                display,
                facts.describe(),
            )
        return
    if require_sync:
        raise ConfigurationError(
            f"require_sync=1 but commits on PostgreSQL at {display} do not wait for a standby "
            f"({facts.describe()}): {_SETTINGS_FIX}; or drop require_sync from the URL to accept "
            "that a failover may lose the last commits"
        )
    if facts.standbys:
        log.warning(
            "PostgreSQL at %s replicates asynchronously (%s): a standby promoted after this "
            "server dies may lack its last commits, and a run leased or finished there may run "
            "again. To make commits wait for a standby, %s, and add require_sync=1 to the URL so "
            "that Relay refuses a server where they do not",
            display,
            facts.describe(),
            _SETTINGS_FIX,
        )
