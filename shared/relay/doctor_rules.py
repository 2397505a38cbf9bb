"""The doctor's rules: one table per store, from each store's documented semantics.

A table maps every failure of :data:`FAILURES` to its :class:`Rule` list, tried in order; the
first whose ``when`` holds decides, and each list's last rule always holds (:func:`ALWAYS`). A
rule reads the settings through :class:`Facts`, which raises :class:`UnknownFact` for a setting the
store would not show. ``WARNINGS`` lists states that stop or slow every step now. The settings
come from each backend's ``durability_facts()``; :mod:`relay.doctor` applies the tables, and
``docs/doctor.md`` explains each rule in words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FAILURES",
    "READ_HINTS",
    "TABLES",
    "WARNINGS",
    "Cost",
    "Facts",
    "Failure",
    "Rule",
    "UnknownFact",
]

Failure = Literal["instance crash", "store restart", "power loss", "failover", "partition"]
Cost = Literal["nothing", "run twice", "unknown"]
FAILURES: tuple[Failure, ...] = (
    "instance crash",
    "store restart",
    "power loss",
    "failover",
    "partition",
)
"""What can fail: a Relay instance's process (SIGKILL, out of memory), the store's server process,
the store host's power or OS, the store's primary (a replica is promoted), the network between
instances and the store or between the store's own servers."""


class UnknownFact(Exception):
    """Raised inside a rule that needs a setting the store would not show."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Facts:
    """A store's settings for the rules: reading one that is ``None`` raises :class:`UnknownFact`,
    and every name read is remembered, so a finding can show what it was decided on."""

    def __init__(self, values: Mapping[str, object]) -> None:
        self.values = dict(values)
        self.read: list[str] = []

    def get(self, name: str) -> object:
        """The setting ``name``; :class:`UnknownFact` if the store did not show it."""
        if name not in self.read:
            self.read.append(name)
        value = self.values.get(name)
        if value is None:
            raise UnknownFact(name)
        return value

    def peek(self, name: str) -> object:
        """The setting ``name``, or ``None`` if the store did not show it (no exception)."""
        if name not in self.read:
            self.read.append(name)
        return self.values.get(name)

    def text(self, name: str) -> str:
        """The setting as lower-case text."""
        return str(self.get(name)).lower()

    def number(self, name: str) -> int:
        """The setting as a whole number."""
        value = self.get(name)
        return int(value) if isinstance(value, int | float | str) else 0


@dataclass(frozen=True)
class Rule:
    """One line of a store's table: if ``when`` holds, the failure costs ``cost``.

    ``why`` and ``fix`` may name settings in braces (``{appendfsync}``); the first line whose
    ``when`` holds decides.
    """

    when: Callable[[Facts], bool]
    cost: Cost
    why: str
    fix: str = ""


def ALWAYS(facts: Facts) -> bool:
    """The last rule of every list."""
    return True


_TAKEN_OVER = Rule(
    ALWAYS, "nothing",
    "a step is done in the store before it returns; the dead instance's runs are taken over "
    "once their lease expires, with a newer token, and count as an attempt",
)  # fmt: skip

SQLITE: dict[Failure, tuple[Rule, ...]] = {
    "instance crash": (_TAKEN_OVER,),
    "store restart": (
        Rule(ALWAYS, "nothing", "SQLite has no server: each step is in the WAL file, which "
             "outlives the process that wrote it (journal_mode={journal_mode})"),
    ),
    "power loss": (
        Rule(lambda f: f.text("durability") == "full", "nothing",
             "durability=full: every step but a heartbeat is flushed to disk (synchronous=FULL) "
             "before it returns; a lost heartbeat only shortens its lease"),
        Rule(ALWAYS, "run twice",
             "durability={durability}: steps commit with synchronous=NORMAL and reach the disk at "
             "the next checkpoint, so a power loss or OS crash can undo the last leases and "
             "finishes, and those runs run again",
             "drop durability=fast from the URL (durability=full is the default)"),
    ),
    "failover": (
        Rule(ALWAYS, "nothing", "one file on one host: no replica to promote (a restore from a "
             "backup would lose the steps since it)"),
    ),
    "partition": (
        Rule(ALWAYS, "nothing", "every instance reads the file on its own host: no network "
             "between them and the store"),
    ),
}  # fmt: skip


def _pg_sync(f: Facts) -> bool:
    """Commits wait for a synchronous standby that is connected."""
    waits = f.text("synchronous_commit") in ("on", "remote_write", "remote_apply")
    return waits and f.text("synchronous_standby_names") != "" and f.number("sync_standbys") > 0


_PG_ASYNC = Rule(
    ALWAYS, "run twice",
    "{standbys} standby(s) replicate asynchronously (synchronous_standby_names="
    "'{synchronous_standby_names}', synchronous_commit={synchronous_commit}): a promoted standby "
    "lacks the commits it had not received, and those runs may run again",
    "set synchronous_standby_names (e.g. 'FIRST 1 (standby1)') with synchronous_commit on, and "
    "let the failover promote a synchronous standby",
)  # fmt: skip

POSTGRESQL: dict[Failure, tuple[Rule, ...]] = {
    "instance crash": (_TAKEN_OVER,),
    "store restart": (
        Rule(lambda f: f.text("synchronous_commit") == "off", "run twice",
             "synchronous_commit=off: a commit returns before its WAL is flushed, so a server "
             "crash loses the last commits (up to 3 x wal_writer_delay), and those runs may run "
             "again", "ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf()"),
        Rule(ALWAYS, "nothing", "a commit's WAL is written before it returns "
             "(synchronous_commit={synchronous_commit}); a restart replays it"),
    ),
    "power loss": (
        Rule(lambda f: f.text("fsync") == "off", "run twice",
             "fsync=off: nothing is forced to disk, so a power loss or OS crash can lose recent "
             "commits (or corrupt the database), and those runs may run again",
             "fsync = on in postgresql.conf, then restart the server"),
        Rule(lambda f: f.text("synchronous_commit") == "off", "run twice",
             "synchronous_commit=off: a commit returns before its WAL reaches the disk, so a "
             "power loss loses the last commits, and those runs may run again",
             "ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf()"),
        Rule(ALWAYS, "nothing", "fsync={fsync}, synchronous_commit={synchronous_commit}: a "
             "commit is on disk before it returns (heartbeats alone do not wait: a lost renewal "
             "only shortens its lease)"),
    ),
    "failover": (
        Rule(lambda f: f.number("standbys") == 0, "nothing", "no standby is connected "
             "(pg_stat_replication is empty): none to promote (a restore from a backup would "
             "lose the commits since it)"),
        Rule(_pg_sync, "nothing", "commits wait for a synchronous standby ({sync_standbys} of "
             "the {standbys} connected; synchronous_standby_names="
             "'{synchronous_standby_names}'): promoting a synchronous one loses nothing (a "
             "failover that promotes another may lose the last commits)"),
        _PG_ASYNC,
    ),
    "partition": (
        Rule(lambda f: f.number("standbys") == 0, "nothing", "one server: instances cut off "
             "from it wait, and a runner cut off past its lease is taken over and fenced by its "
             "token"),
        Rule(_pg_sync, "nothing", "a primary cut off from its synchronous standby cannot "
             "commit: its steps wait instead of being lost when that standby is promoted"),
        _PG_ASYNC,
    ),
}  # fmt: skip


def _replicas(f: Facts) -> int:
    return f.number("connected_replicas")


_REDIS_AOF = "CONFIG SET appendonly yes (and appendonly yes in redis.conf)"
_REDIS_NO_AOF = (
    Rule(lambda f: f.text("appendonly") == "no" and f.peek("save") == "", "run twice",
         "appendonly no and no snapshots (save ''): the server comes back empty, without a "
         "lease, record or job, so recent runs may run again (tokens stay safe: they are at "
         "least the server's clock)", _REDIS_AOF),
    Rule(lambda f: f.text("appendonly") == "no", "run twice", "appendonly no: the server "
         "comes back with its last snapshot (save '{save}'), without the steps written since, "
         "so those runs may run again (its replicas copy the old data too)", _REDIS_AOF),
)  # fmt: skip

REDIS: dict[Failure, tuple[Rule, ...]] = {
    "instance crash": (_TAKEN_OVER,),
    "store restart": (
        *_REDIS_NO_AOF,
        Rule(ALWAYS, "nothing", "appendonly {appendonly}: every step is written to the "
             "append-only file before Redis answers; a restart reloads it"),
    ),
    "power loss": (
        *_REDIS_NO_AOF,
        Rule(lambda f: f.text("appendfsync") == "always", "nothing", "appendfsync always: "
             "each step is on disk before Redis answers"),
        Rule(ALWAYS, "run twice", "appendfsync {appendfsync}: the append-only file is flushed "
             "to disk every second (everysec) or when the OS decides (no), so a power loss "
             "undoes the last steps, and those runs may run again",
             "CONFIG SET appendfsync always (slower steps)"),
    ),
    "failover": (
        Rule(lambda f: _replicas(f) == 0, "nothing", "no replica is connected (INFO "
             "replication): none to promote"),
        Rule(lambda f: f.number("wait_replicas") >= 1, "nothing", "wait_replicas="
             "{wait_replicas}: each step waits until that many replicas confirm it (WAIT), and "
             "one they did not confirm counts as not done; the replica promoted (the most up "
             "to date, as Sentinel and Cluster choose) holds every step Relay acted on"),
        Rule(ALWAYS, "run twice", "replication is asynchronous: a step the primary answered "
             "before its {connected_replicas} replica(s) received it is lost when one of them "
             "is promoted, and that run may run again",
             "add wait_replicas=1 to the URL (each step waits for a replica to confirm it)"),
    ),
    "partition": (
        Rule(lambda f: _replicas(f) == 0, "nothing", "one server: instances cut off from it "
             "wait, and a runner cut off past its lease is taken over and fenced by its token"),
        Rule(lambda f: f.number("wait_replicas") >= _replicas(f), "nothing", "every replica "
             "confirms each step (wait_replicas={wait_replicas}): a primary cut off from any of "
             "them gets no step confirmed, and whichever replica is promoted holds every step "
             "Relay acted on"),
        Rule(lambda f: f.number("wait_replicas") >= 1, "run twice", "wait_replicas="
             "{wait_replicas} of {connected_replicas} replicas: a primary cut off with some of "
             "its replicas still gets steps confirmed, and a replica promoted on the other side "
             "lacks them", "wait_replicas={connected_replicas} in the URL (every replica; steps "
             "then fail while one is down)"),
        Rule(ALWAYS, "run twice", "a primary cut off from its replicas keeps answering the "
             "instances on its side (min-replicas-to-write {min_replicas_to_write} stops it "
             "after min-replicas-max-lag, {min_replicas_max_lag} s, at best) while a replica is "
             "promoted; those steps are dropped when it rejoins, and their runs may run again",
             "add wait_replicas=1 to the URL"),
    ),
}  # fmt: skip

_NATS_ONE_COPY = "the bucket has one copy (replicas={replicas})"

NATS: dict[Failure, tuple[Rule, ...]] = {
    "instance crash": (_TAKEN_OVER,),
    "store restart": (
        Rule(lambda f: f.text("storage") == "file", "nothing", "storage=file: a write is in "
             "the stream's file before the server acknowledges it; a restart reloads it"),
        Rule(lambda f: f.number("replicas") >= 3, "nothing", "storage=memory, replicas="
             "{replicas}: a restarted server copies the bucket back from the others"),
        Rule(ALWAYS, "run twice", "storage=memory: a restart of the server loses the bucket, "
             "so recent runs may run again", "recreate the bucket with storage=file"),
    ),
    "power loss": (
        Rule(lambda f: f.number("replicas") >= 2, "nothing", "each write is on a majority of "
             "the bucket's {replicas} servers before it is acknowledged: one server's power "
             "loss loses nothing (a majority's at once could lose the last writes)"),
        Rule(lambda f: f.text("storage") == "memory", "run twice", "storage=memory and "
             + _NATS_ONE_COPY + ": a power loss loses the bucket",
             "replicas=3 on a 3-server cluster, with storage=file"),
        Rule(ALWAYS, "run twice", "JetStream fsyncs every sync_interval (2 minutes by "
             "default; a client cannot read it) and " + _NATS_ONE_COPY + ": a power loss can "
             "undo the last steps, and those runs may run again",
             "replicas=3 on a 3-server cluster (a new bucket), or sync_interval: always in the "
             "server's jetstream config"),
    ),
    "failover": (
        Rule(lambda f: f.number("replicas") >= 2, "nothing", "replicas={replicas}: a new "
             "leader is elected among the servers that hold every acknowledged write"),
        Rule(ALWAYS, "nothing", _NATS_ONE_COPY + ": nothing to fail over to; while its server "
             "is down every step waits, and a lost disk loses every lease"),
    ),
    "partition": (
        Rule(lambda f: f.number("replicas") >= 2, "nothing", "only the side holding a "
             "majority of the bucket's {replicas} servers accepts writes"),
        Rule(ALWAYS, "nothing", _NATS_ONE_COPY + ": instances cut off from its server wait, "
             "and a runner cut off past its lease is taken over and fenced by its token"),
    ),
}  # fmt: skip

TABLES: dict[str, dict[Failure, tuple[Rule, ...]]] = {
    "sqlite": SQLITE, "postgresql": POSTGRESQL, "redis": REDIS, "nats": NATS,
}  # fmt: skip
"""Each store's table, by the ``"store"`` its backend's facts name."""

WARNINGS: dict[str, tuple[tuple[Callable[[Facts], bool], str], ...]] = {
    "postgresql": (
        (lambda f: f.text("role") == "standby", "this server is a standby (in recovery): Relay "
         "cannot write here; point the URL at the primary"),
        (lambda f: f.text("synchronous_standby_names") != "" and f.number("sync_standbys") == 0,
         "synchronous_standby_names='{synchronous_standby_names}' but no synchronous standby "
         "is connected: every commit waits for one"),
    ),
    "redis": (
        (lambda f: f.text("role") != "primary", "this server is a {role}, not a primary: Relay "
         "cannot write here; point the URL at the primary"),
        (lambda f: f.number("wait_replicas") > f.number("connected_replicas"),
         "wait_replicas={wait_replicas} but {connected_replicas} replica(s) are connected: "
         "every step fails as not acknowledged"),
        (lambda f: f.number("min_replicas_to_write") > f.number("connected_replicas"),
         "min-replicas-to-write {min_replicas_to_write} but {connected_replicas} replica(s) "
         "are connected: the server refuses every write"),
    ),
    "nats": (
        (lambda f: f.number("peers_current") < f.number("replicas"),
         "{peers_current} of the bucket's {replicas} servers are current: writes need a "
         "majority of them"),
    ),
}  # fmt: skip
"""States that stop or slow every step now, by store."""

_CONFIG_GET = (
    "run relay doctor as a user that may run CONFIG GET (an operator's: Relay's own user needs "
    "no CONFIG, see docs/security.md), or read {} in the service's console"
)
READ_HINTS: dict[str, str] = {
    "sync_standbys": "grant the URL's user pg_monitor, so that it reads pg_stat_replication's "
    "sync_state",
    **{name: _CONFIG_GET.format(name) for name in ("appendfsync", "save", "appendonly")},
    "connected_replicas": "let the URL's user run INFO (+info)",
    "role": "let the URL's user run INFO (+info)",
}
"""How to let the doctor read a setting the store hid, by the setting's name."""
