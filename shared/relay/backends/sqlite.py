"""SQLite lease backend: the embedded default, safe for many processes on one host.

Every step is one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock at once, so the
read, the decision and the write of a step happen as one. WAL mode lets readers go on meanwhile,
and a busy timeout makes concurrent writers wait their turn instead of failing. The host's clock
decides expiry (all processes share it); tests can inject another.

Durability (URL option ``durability``): with ``full``, the default, every step but a heartbeat
commits with ``synchronous=FULL``, so the WAL is flushed to disk before the step returns and an OS
crash or power loss cannot roll it back. A heartbeat commits with ``synchronous=NORMAL``: a renewal
lost in a crash only shortens a lease (as on PostgreSQL). With ``fast`` every step commits with
``NORMAL``: the last steps before an OS crash may roll back (a process crash still loses nothing).
Fencing tokens stay above the host's clock in microseconds, so even a lost tail cannot hand a token
out twice.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal, cast

from relay.backends._lost import finished_again, is_held, lease_lost, started_elsewhere
from relay.backends._ms import ms as _ms
from relay.backends._ms import optional_from_ms
from relay.backends._sqlite_connection import SharedConnection
from relay.backends._sqlite_layout import read_layout, record_layout
from relay.backends._sqlite_schedules import MIGRATION as SCHEDULES_MIGRATION
from relay.backends._sqlite_schedules import SQLiteSchedules
from relay.backends._url import BackendURL
from relay.clock import time as relay_time
from relay.contract import AcquireRequest, AcquireResult, JobHistory, JobInfo, Outcome
from relay.errors import (
    BackendUnavailable,
    ConfigurationError,
    LeaseLost,
    StoreNotFound,
    StoreTooNew,
    StoreTooOld,
)
from relay.instances import InstanceInfo, definitions_json, parse_definitions
from relay.layout import FLOOR, Layout, running, version_key
from relay.lease_rules import BUFFERED, Action, StoredRun, decide
from relay.runs import MANUAL, Run, RunRecord, RunState, check_slots, from_ms, run_id, slot_ms

__all__ = ["DURABILITY", "Durability", "SQLiteLeaseBackend"]

Durability = Literal["full", "fast"]
DURABILITY: dict[str, str] = {"full": "FULL", "fast": "NORMAL"}
"""The URL option ``durability``'s choices and the ``synchronous`` setting of their steps."""

SCHEMA_VERSION = 9
_SCHEMA = resources.files("relay.backends").joinpath("sqlite.sql").read_text()

# The statements that bring a database from the version before each key to that version.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Version 1 kept the token counters in a table of their own and indexed live runs: two more
    # pages to write per lease, one more per finish. Version 2 keeps both in each job's row.
    2: (
        "ALTER TABLE relay_runs ADD COLUMN live INTEGER",
        "INSERT INTO relay_runs (run_id, job, slot_ms, state, token, updated_ms, live) "
        "SELECT j.name || '@~', j.name, 0, 'job', j.token, 0, "
        "(SELECT count(*) FROM relay_runs AS r "
        "WHERE r.job = j.name AND r.state IN ('running', 'pending')) FROM relay_jobs AS j",
        "DROP TABLE relay_jobs",
        "DROP INDEX relay_runs_live",
        "CREATE INDEX relay_job_rows ON relay_runs (job) WHERE state = 'job'",
    ),
    # Version 3 changes nothing: it keeps SQLite's numbers in step with PostgreSQL's (whose
    # version 3 floors tokens by the server's clock; SQLite floors them in Python).
    3: (),
    # Version 4: each instance's own heartbeat, for `relay instances` and `relay health`.
    4: (
        "CREATE TABLE IF NOT EXISTS relay_instances (owner TEXT PRIMARY KEY, role TEXT NOT NULL, "
        "host TEXT NOT NULL, pid INTEGER NOT NULL, started_ms INTEGER NOT NULL, "
        "version TEXT NOT NULL, interval_ms INTEGER NOT NULL, beat_ms INTEGER NOT NULL, "
        "expires_ms INTEGER NOT NULL)",
    ),
    # Version 5: the control plane. A job row holds its registered definition and, while the job
    # is paused, when, by whom and why; run rows leave these empty.
    5: (
        "ALTER TABLE relay_runs ADD COLUMN spec TEXT",
        "ALTER TABLE relay_runs ADD COLUMN paused_ms INTEGER",
        "ALTER TABLE relay_runs ADD COLUMN paused_by TEXT",
        "ALTER TABLE relay_runs ADD COLUMN paused_reason TEXT",
    ),
    # Version 6: stored schedules (relay.backends._sqlite_schedules).
    6: SCHEDULES_MIGRATION,
    # Version 7: a run of a stored schedule keeps the version it was first leased with; removed
    # schedules are found by when they were removed, for retention.
    7: (
        "ALTER TABLE relay_runs ADD COLUMN schedule_version INTEGER",
        "CREATE INDEX IF NOT EXISTS relay_schedules_removed ON relay_schedules (updated_ms) "
        "WHERE definition IS NULL",
    ),
    # Version 8 (Relay 0.2): an instance records why it is not working although it beats. Only
    # adds: Relay 0.1 (version 7) goes on using the file (see relay.layout).
    8: ("ALTER TABLE relay_instances ADD COLUMN problem TEXT",),
    # Version 9 (Relay 0.2): the job definitions an instance declares (relay.definitions), which
    # Relay 0.1 neither writes nor reads. Only adds, like version 8.
    9: ("ALTER TABLE relay_instances ADD COLUMN definitions TEXT",),
}
_INSTANCE_COLUMNS = "owner, role, host, pid, started_ms, version, interval_ms, beat_ms, expires_ms"

# A step's statements are constants: the driver's statement cache finds them by their text.
_INSERT_NEW_RUN = (
    "INSERT INTO relay_runs (run_id, job, slot_ms, state, attempt, failures, max_attempts, "
    "token, owner, expires_ms, updated_ms, schedule_version) "
    "VALUES (?, ?, ?, 'running', 1, 0, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"
)
_HELD = "WHERE run_id = ?{} AND token = ?{} AND state = 'running'"
_HEARTBEAT = "UPDATE relay_runs SET expires_ms = ?1, updated_ms = ?2 " + _HELD.format(3, 4)
_SUCCEED = (
    "UPDATE relay_runs SET state = 'succeeded', error = ?1, reason = NULL, expires_ms = NULL, "
    "finished_ms = ?2, updated_ms = ?2 " + _HELD.format(3, 4)
)
_FAIL = (
    "UPDATE relay_runs SET failures = failures + 1, error = ?1, reason = 'failed', "
    "expires_ms = NULL, updated_ms = ?2, "
    "state = CASE WHEN failures + 1 >= max_attempts THEN 'failed' ELSE 'pending' END, "
    "finished_ms = CASE WHEN failures + 1 >= max_attempts THEN ?2 END " + _HELD.format(3, 4)
)
_RELEASE = (
    "UPDATE relay_runs SET state = 'pending', reason = 'released', expires_ms = NULL, "
    "attempt = attempt - (started_ms IS NULL), updated_ms = ?1 " + _HELD.format(2, 3)
)

_COLUMNS = (
    "run_id, job, slot_ms, state, attempt, failures, token, owner, reason, "
    "expires_ms, started_ms, finished_ms, error, schedule_version"
)
# Read-only on a file no scheduler of this version opened yet: runs have no schedule version.
_COLUMNS_BEFORE_7 = _COLUMNS.replace("schedule_version", "NULL")


class SQLiteLeaseBackend(SQLiteSchedules):
    """Leases in one SQLite file: ``sqlite:///relay.db`` (relative) or ``sqlite:////abs/path.db``.

    ``read_only`` opens an existing file for reading only: a missing file raises
    :class:`~relay.errors.StoreNotFound` and nothing is created or migrated. ``empty_ok`` (with
    ``read_only``, for ``relay doctor``) opens a file that is missing or holds no Relay schema yet
    all the same, still creating nothing: only :meth:`durability_facts` may then be called.
    """

    capability: Literal["lease"] = "lease"
    LAYOUT = SCHEMA_VERSION
    """The layout this Relay writes (:mod:`relay.layout`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = relay_time,
        read_only: bool = False,
        durability: Durability = "full",
        migrate: bool = True,
        empty_ok: bool = False,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._durable = DURABILITY[_checked_durability(durability)]
        self._synchronous: tuple[sqlite3.Connection | None, str] = (None, "")
        if read_only:
            self._version = self._check_read_only(busy_timeout, empty_ok)
            if not self.path.is_file():  # empty_ok, and no file to open: nothing is created
                self._shared = SharedConnection(lambda: sqlite3.connect(":memory:"))
                return
            self._shared = SharedConnection(lambda: self._open_read_only(busy_timeout))
            return
        try:
            self._shared = SharedConnection(lambda: open_wal(self.path, busy_timeout))
            self._create_schema(migrate)
            self._version = SCHEMA_VERSION
        except sqlite3.Error as exc:
            if "locked" in str(exc):
                hint = (
                    f"another process held its write lock for longer than busy_timeout "
                    f"({busy_timeout:g}s): find that process, or raise busy_timeout in the URL"
                )
            else:
                hint = "check that its folder exists and is writable"
            raise BackendUnavailable(
                f"cannot open SQLite database {str(self.path)!r}: {exc}; {hint}"
            ) from exc

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SQLiteLeaseBackend:
        """Open the database a ``sqlite:///…`` URL names.

        Options: ``busy_timeout`` in seconds, ``durability`` (``full``, the default, or ``fast``),
        ``migrate`` (``false``: never bring an existing file to this Relay's layout).
        """
        parsed = BackendURL(url)
        parsed.check_options(["busy_timeout", "durability", "migrate"], "the SQLite backend")
        if parsed.parts.netloc:
            raise ConfigurationError(
                f"SQLite URL {parsed.redacted()!r} has a host; use sqlite:///relative.db or sqlite:////abs/path.db"
            )
        path = _path_of(parsed)
        if not path:
            raise ConfigurationError(
                f"SQLite URL {parsed.redacted()!r} names no file: use sqlite:///relay.db"
            )
        durability = _checked_durability(parsed.option("durability", "full"))
        return cls(
            path,
            busy_timeout=parsed.float_option("busy_timeout", 30.0),
            durability=durability,
            **{"migrate": parsed.flag_option("migrate", True), **kwargs},
        )

    @classmethod
    def name_for(cls, url: str) -> str:
        """The :attr:`name` of the backend ``url`` opens, without opening it (a deferred one's)."""
        return f"SQLite ({Path(_path_of(BackendURL(url)))})"

    @property
    def name(self) -> str:
        return f"SQLite ({self.path})"

    def durability_facts(self) -> dict[str, object]:
        """What ``relay doctor`` judges (:mod:`relay.doctor`): the URL's durability and the
        file's journal mode. Only reads."""
        mode = None  # no file yet: nothing to read (Relay creates it in WAL mode)
        if self.path.is_file():
            with self._read() as conn:
                mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        durability = "full" if self._durable == DURABILITY["full"] else "fast"
        return {
            "store": "sqlite", "durability": durability, "journal_mode": mode,
            "relay_data": self._version > 0,
        }  # fmt: skip

    def _open_read_only(self, busy_timeout: float) -> sqlite3.Connection:
        """A connection that cannot write (``mode=ro``)."""
        return sqlite3.connect(
            f"{self.path.absolute().as_uri()}?mode=ro", uri=True, timeout=busy_timeout,
            isolation_level=None, check_same_thread=False,
        )  # fmt: skip

    def _check_read_only(self, busy_timeout: float, empty_ok: bool = False) -> int:
        """The schema version of the file to read, which must exist and hold Relay's schema
        (``empty_ok``: 0 for a file that is missing or holds none)."""
        if not self.path.is_file():
            if empty_ok:
                return 0
            raise StoreNotFound(
                f"SQLite database {str(self.path)!r} does not exist (resolved to "
                f"{str(self.path.absolute())!r}); check the path in the URL"
            )
        try:
            conn = self._open_read_only(busy_timeout)
            try:
                version = _installed_version(conn)
                layout = None if version is None else read_layout(conn, version, SCHEMA_VERSION)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise BackendUnavailable(
                f"cannot read SQLite database {str(self.path)!r}: {exc}"
            ) from exc
        if layout is None:
            if empty_ok:
                return 0
            raise StoreNotFound(f"SQLite file {str(self.path)!r} holds no Relay schema")
        layout.check(f"SQLite database {self.path}")
        return min(layout.layout, SCHEMA_VERSION)  # a newer layout whose floor we meet: as ours

    # -- the lease contract ------------------------------------------------------------------

    def acquire(self, request: AcquireRequest) -> AcquireResult:
        with self._write() as (conn, now_ms):
            return self._acquire_one(conn, request, now_ms)

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        with self._write() as (conn, now_ms):
            return [self._acquire_one(conn, request, now_ms) for request in requests]

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        with self._write() as (conn, now_ms):
            row = conn.execute(
                "SELECT state, token, owner, started_ms, job, slot_ms, attempt, schedule_version "
                "FROM relay_runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            found = None if row is None else (row[0], row[1])
            if row is None or not is_held(found, token):
                raise lease_lost(run_id, token, found)
            if row[3] is not None and row[2] != owner:
                raise started_elsewhere(run_id, token, row[2])
            conn.execute(
                "UPDATE relay_runs SET owner = ?, started_ms = COALESCE(started_ms, ?), "
                "expires_ms = ?, updated_ms = ? WHERE run_id = ?",
                (owner, now_ms, now_ms + _ms(lease), now_ms, run_id),
            )
            return Run(
                run_id, row[4], from_ms(row[5]), row[6], token, owner, schedule_version=row[7]
            )

    def heartbeat(self, run_id: str, token: int, lease: float) -> None:
        with self._write(durable=False) as (conn, now_ms):
            _update_held(conn, _HEARTBEAT, (now_ms + _ms(lease), now_ms, run_id, token))

    def heartbeat_many(
        self, runs: Sequence[tuple[str, int]], lease: float
    ) -> list[LeaseLost | None]:
        """:meth:`heartbeat` of each run, in one transaction."""
        lost: list[LeaseLost | None] = []
        with self._write(durable=False) as (conn, now_ms):
            for run_id, token in runs:
                try:
                    _update_held(conn, _HEARTBEAT, (now_ms + _ms(lease), now_ms, run_id, token))
                except LeaseLost as exc:
                    lost.append(exc)
                else:
                    lost.append(None)
        return lost

    def finish(
        self, run_id: str, token: int, *, succeeded: bool, error: str | None = None
    ) -> RunState:
        with self._write() as (conn, now_ms):
            try:
                _update_held(conn, _SUCCEED if succeeded else _FAIL, (error, now_ms, run_id, token))
            except LeaseLost:
                again = _finished_again(conn, run_id, token)
                if again is None:
                    raise
                return again
            if succeeded:
                _count_live(conn, _job_of(run_id), -1)
                return RunState.SUCCEEDED
            row = conn.execute("SELECT state FROM relay_runs WHERE run_id = ?", (run_id,))
            state = RunState(row.fetchone()[0])
            if state is RunState.FAILED:
                _count_live(conn, _job_of(run_id), -1)
            return state

    def release(self, run_id: str, token: int) -> None:
        with self._write() as (conn, now_ms):
            _update_held(conn, _RELEASE, (now_ms, run_id, token))

    def skip(self, job: str, slot: datetime, reason: str) -> bool:
        with self._write() as (conn, now_ms):
            return self._insert_skipped(conn, job, slot, reason, now_ms)

    def skip_many(self, runs: Sequence[tuple[str, datetime]], reason: str) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        with self._write() as (conn, now_ms):
            return [self._insert_skipped(conn, job, slot, reason, now_ms) for job, slot in runs]

    def last_slot(self, job: str) -> datetime | None:
        return self.last_slots([job])[job]

    def last_slots(self, jobs: Sequence[str]) -> dict[str, datetime | None]:
        # In run-id order a whole-second slot sorts before the sub-second ones of its second,
        # so the latest slot is one of the last two ids.
        found: dict[str, datetime | None] = {}
        with self._read() as conn:
            for job in jobs:
                row = conn.execute(
                    "SELECT MAX(slot_ms) FROM (SELECT slot_ms FROM relay_runs "
                    "WHERE run_id > ? AND run_id < ? ORDER BY run_id DESC LIMIT 2)",
                    _slot_range(job),
                )
                value = row.fetchone()[0]
                found[job] = None if value is None else from_ms(value)
        return found

    def job_history(self, jobs: Sequence[str], depth: int) -> dict[str, JobHistory]:
        # One statement per job, each part walking one key range from its newest id: its slot
        # runs (one more than asked: see last_slots), then its latest slot and manual successes.
        columns = self._columns
        part = f"SELECT * FROM (SELECT {columns}, {{kind}} FROM relay_runs WHERE run_id > ? AND "
        statement = " UNION ALL ".join(
            part.format(kind=kind) + f"run_id < ?{where} ORDER BY run_id DESC LIMIT ?)"
            for kind, where in (
                (0, ""),
                (1, " AND state = 'succeeded'"),
                (2, " AND state = 'succeeded'"),
            )
        )
        found = {}
        with self._read() as conn:
            for job in jobs:
                rows = conn.execute(
                    statement,
                    (*_slot_range(job), depth + 1, *_slot_range(job), 2, *_manual_range(job), 2),
                ).fetchall()
                recent = sorted(
                    (r[:-1] for r in rows if r[-1] == 0), key=lambda r: r[2], reverse=True
                )
                wins = [r[:-1] for r in rows if r[-1] != 0]
                best = max(wins, key=lambda row: row[2], default=None)
                found[job] = JobHistory(
                    tuple(_record(row) for row in recent[:depth]),
                    None if best is None else _record(best),
                )
        return found

    def mark_once(self, key: str, ttl: float) -> bool:
        with self._write() as (conn, now_ms):
            conn.execute(
                "DELETE FROM relay_meta WHERE key >= 'once:' AND key < 'once;' "
                "AND CAST(value AS INTEGER) <= ?",
                (now_ms,),
            )
            return bool(
                conn.execute(
                    "INSERT OR IGNORE INTO relay_meta (key, value) VALUES (?, ?)",
                    (f"once:{key}", str(now_ms + _ms(ttl))),
                ).rowcount
            )

    def reclaimable(self, limit: int = 100) -> list[RunRecord]:
        now_ms = self._now_ms()
        with self._read() as conn:
            jobs = conn.execute(
                "SELECT job, live FROM relay_runs WHERE state = 'job' AND live > 0"
            ).fetchall()
            rows = [
                row
                for job, live in jobs
                for row in _live_runs(conn, job, live, self._columns)
                if row[3] == "pending" or row[9] <= now_ms
            ]
        rows.sort(key=lambda row: (row[2], row[0]))
        return [_record(row) for row in rows[:limit]]

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        params: tuple[str, ...]
        where, params = "WHERE state != 'job'", ()
        if job is not None:
            where, params = "WHERE run_id > ? AND run_id < ?", _job_range(job)
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {self._columns} FROM relay_runs {where} "
                "ORDER BY slot_ms DESC, run_id LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [_record(row) for row in rows]

    def now(self) -> datetime:
        return from_ms(self._now_ms())

    @property
    def _columns(self) -> str:
        return _COLUMNS if self._version >= 7 else _COLUMNS_BEFORE_7

    def record_instance(self, info: InstanceInfo, ttl: float) -> None:
        with self._write() as (conn, now_ms):
            conn.execute("DELETE FROM relay_instances WHERE expires_ms <= ?", (now_ms,))
            conn.execute(
                f"INSERT OR REPLACE INTO relay_instances ({_INSTANCE_COLUMNS}, tasks, problem, "
                "definitions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    info.owner, info.role, info.host, info.pid, slot_ms(info.started_at),
                    info.version, _ms(info.interval), now_ms, now_ms + _ms(ttl),
                    json.dumps(list(info.tasks)), info.problem, definitions_json(info),
                ),
            )  # fmt: skip

    def layout(self) -> Layout:
        """The file's layout record (:mod:`relay.layout`)."""
        with self._read() as conn:
            return read_layout(conn, _installed_version(conn) or 0, SCHEMA_VERSION)

    def record_layout(self, layout: Layout) -> None:
        """Write the file's layout record (``relay migrate --contract``; tests)."""
        with self._write() as (conn, _):
            record_layout(conn, layout.layout, layout.min_relay)

    def instances(self) -> list[InstanceInfo]:
        if self._version < 4:  # read-only on a file no scheduler of this version opened yet
            return []
        tasks = "tasks" if self._version >= 6 else "NULL"
        problem = "problem" if self._version >= 8 else "NULL"
        declared = "definitions" if self._version >= 9 else "NULL"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_INSTANCE_COLUMNS}, {tasks}, {problem}, {declared} FROM relay_instances "
                "WHERE expires_ms > ? ORDER BY role, owner",
                (self._now_ms(),),
            ).fetchall()
        return [_instance(*row) for row in rows]

    # -- the control plane -------------------------------------------------------------------

    def register_jobs(self, specs: dict[str, str]) -> None:
        with self._write() as (conn, _):
            for job, spec in specs.items():
                conn.execute(
                    "INSERT INTO relay_runs (run_id, job, slot_ms, state, token, live, updated_ms, "
                    "spec) VALUES (?, ?, 0, 'job', 0, 0, 0, ?) "
                    "ON CONFLICT (run_id) DO UPDATE SET spec = excluded.spec",
                    (_job_row_id(job), job, spec),
                )

    def jobs(self) -> list[JobInfo]:
        return self._job_rows("ORDER BY job")

    def job_page(self, after: str = "", limit: int = 50, prefix: str = "") -> list[JobInfo]:
        # The partial index of job rows gives them in name order: one range of it, whose lower
        # bound is one term (given two, SQLite bounds the range by one and filters by the other).
        lower = "job > ?" if after >= prefix else "job >= ?"
        return self._job_rows(
            f"AND {lower} AND job < ? ORDER BY job LIMIT ?",
            (max(after, prefix), prefix + _LAST, limit),
        )

    def job_infos(self, names: Sequence[str]) -> list[JobInfo]:
        found: list[JobInfo] = []
        for start in range(0, len(names), 500):
            part = list(names[start : start + 500])
            marks = ", ".join("?" * len(part))
            ids = tuple(_job_row_id(job) for job in part)
            found += self._job_rows(f"AND run_id IN ({marks})", ids)
        return sorted(found, key=lambda info: info.name)

    def _job_rows(self, rest: str, params: tuple[object, ...] = ()) -> list[JobInfo]:
        """The job rows that ``rest`` (more conditions, an order, a limit) selects."""
        # Read-only on a file no scheduler of this version opened yet: no definitions, no pauses.
        columns = (
            "spec, paused_ms, paused_by, paused_reason"
            if self._version >= 5
            else ("NULL, NULL, NULL, NULL")
        )
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT job, {columns} FROM relay_runs WHERE state = 'job' {rest}", params
            ).fetchall()
        return [
            JobInfo(job, spec, None if at is None else from_ms(at), by, why)
            for job, spec, at, by, why in rows
        ]

    def pause(self, job: str, reason: str, by: str) -> bool:
        with self._write() as (conn, now_ms):
            _add_live(conn, job, 0)
            return bool(
                conn.execute(
                    "UPDATE relay_runs SET paused_ms = ?, paused_by = ?, paused_reason = ? "
                    "WHERE run_id = ? AND paused_ms IS NULL",
                    (now_ms, by, reason, _job_row_id(job)),
                ).rowcount
            )

    def resume(self, job: str, catch_up: float | None = None) -> list[str]:
        with self._write() as (conn, now_ms):
            conn.execute(
                "UPDATE relay_runs SET paused_ms = NULL, paused_by = NULL, paused_reason = NULL "
                "WHERE run_id = ?",
                (_job_row_id(job),),
            )
            if catch_up is None:
                return []
            ids = [
                row[0]
                for row in conn.execute(
                    "UPDATE relay_runs SET state = 'pending', reason = 'resumed', attempt = 0, "
                    "finished_ms = NULL, updated_ms = ?1 WHERE run_id > ?2 AND run_id < ?3 "
                    "AND state = 'skipped' AND reason = 'paused' AND slot_ms >= ?4 "
                    "RETURNING run_id",
                    (now_ms, *_slot_range(job), now_ms - _ms(catch_up)),
                ).fetchall()
            ]
            _add_live(conn, job, len(ids))
            return sorted(ids)

    def trigger(self, job: str, overlap_skip: bool = False) -> RunRecord:
        with self._write() as (conn, now_ms):
            request = AcquireRequest(job, from_ms(now_ms), "", 0, manual=True)
            rid = request.id
            if overlap_skip and _other_live(conn, job, now_ms):
                _insert_run(conn, rid, request, "skipped", "overlap", now_ms)
            else:
                _insert_run(conn, rid, request, "pending", "manual", now_ms)
                _add_live(conn, job, 1)
            row = conn.execute(f"SELECT {_COLUMNS} FROM relay_runs WHERE run_id = ?", (rid,))
            return _record(row.fetchone())

    def backfill(self, job: str, slots: Sequence[datetime], serial: bool = False) -> list[bool]:
        with self._write() as (conn, now_ms):
            created = [
                conn.execute(
                    "INSERT INTO relay_runs (run_id, job, slot_ms, state, reason, updated_ms) "
                    "VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT (run_id) DO NOTHING",
                    (run_id(job, slot), job, slot_ms(slot), _backfill_reason(serial), now_ms),
                ).rowcount
                == 1
                for slot in slots
            ]
            _add_live(conn, job, sum(created))
            return created

    def prune(self, older_than: float, limit: int = 500) -> int:
        # Look for work without the write lock, so acquires wait only for the ranges that have
        # runs to delete, not for a look at every job.
        cutoff = self._now_ms() - _ms(older_than)
        with self._read() as conn:
            jobs = conn.execute("SELECT job FROM relay_runs WHERE state = 'job'").fetchall()
            ranges = [
                bounds
                for (job,) in jobs
                for bounds in (_slot_range(job), _manual_range(job))
                if _has_old_runs(conn, bounds, cutoff, limit)
            ]
        deleted = 0
        for bounds in ranges:
            if deleted >= limit:
                break
            with self._write() as (conn, _):
                deleted += _prune_range(conn, bounds, cutoff, limit - deleted)
        return deleted

    def close(self) -> None:
        self._shared.close()

    # -- inside a transaction ----------------------------------------------------------------

    def _acquire_one(
        self, conn: sqlite3.Connection, request: AcquireRequest, now_ms: int
    ) -> AcquireResult:
        rid = request.id
        fresh = self._lease_if_new(conn, request, rid, now_ms)
        if fresh is not None:
            return AcquireResult(Outcome.WON, fresh)
        row = conn.execute(
            "SELECT state, expires_ms, failures, max_attempts, reason, attempt FROM relay_runs "
            "WHERE run_id = ?",
            (rid,),
        ).fetchone()
        stored = None if row is None else StoredRun(RunState(row[0]), *row[1:])
        decision = decide(stored, request, now_ms, **_context(conn, request, stored, now_ms))
        if decision.action is Action.SKIP:
            _insert_run(conn, rid, request, "skipped", decision.reason, now_ms)
        elif decision.action is Action.BUFFER:
            _insert_run(conn, rid, request, "pending", BUFFERED, now_ms)
            _add_live(conn, request.job, 1)
        elif decision.action is Action.FAIL:
            conn.execute(
                "UPDATE relay_runs SET state = 'failed', failures = ?, reason = ?, "
                "expires_ms = NULL, finished_ms = ?, updated_ms = ? WHERE run_id = ?",
                (decision.failures, decision.reason, now_ms, now_ms, rid),
            )
            _count_live(conn, request.job, -1)
        elif decision.action is Action.LEASE:
            run = self._lease(conn, request, rid, decision.failures, now_ms, new=stored is None)
            return AcquireResult(Outcome.WON, run)
        return AcquireResult(decision.outcome)

    def _lease_if_new(
        self, conn: sqlite3.Connection, request: AcquireRequest, rid: str, now_ms: int
    ) -> Run | None:
        """The common case in one insert: a run nobody has recorded, with no rule in the way."""
        slot = slot_ms(request.slot)
        stale_after = request.stale_after
        if (
            request.overlap_skip
            or request.buffer_one
            or (stale_after is not None and now_ms - slot > stale_after * 1000)
        ):
            return None
        job = request.job
        last, _, paused = _job_row(conn, job)
        if paused is not None:
            return None  # the full decision records it skipped
        token = max(last + 1, now_ms * 1000)  # as _next_token, from the row read once
        # rowcount, not RETURNING: in SQLite, RETURNING costs about as much as the insert.
        inserted = conn.execute(
            _INSERT_NEW_RUN,
            (rid, job, slot, request.max_attempts, token, request.owner,
             now_ms + _ms(request.lease), now_ms, request.schedule_version),
        ).rowcount  # fmt: skip
        if inserted != 1:
            return None
        _update_job_row(conn, job, token, live_change=1)
        return Run(
            rid, job, request.slot, 1, token, request.owner,
            schedule_version=request.schedule_version,
        )  # fmt: skip

    def _lease(
        self,
        conn: sqlite3.Connection,
        request: AcquireRequest,
        rid: str,
        failures: int,
        now_ms: int,
        *,
        new: bool,
    ) -> Run:
        """Lease the run: a new record (``new``), or a pending or expired one again."""
        token = _next_token(conn, request.job, now_ms)
        _update_job_row(conn, request.job, token, live_change=1 if new else 0)
        expires = now_ms + _ms(request.lease)
        # A takeover or a retry keeps the version the run was first leased with.
        attempt, version = conn.execute(
            "INSERT INTO relay_runs (run_id, job, slot_ms, state, attempt, failures, max_attempts, "
            "token, owner, expires_ms, updated_ms, schedule_version) "
            "VALUES (?, ?, ?, 'running', 1, 0, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id) DO UPDATE SET state = 'running', attempt = attempt + 1, "
            "failures = ?, token = excluded.token, owner = excluded.owner, reason = NULL, "
            "expires_ms = excluded.expires_ms, started_ms = NULL, "
            "updated_ms = excluded.updated_ms, "
            "max_attempts = CASE WHEN attempt = 0 THEN excluded.max_attempts "
            "ELSE max_attempts END, "
            "schedule_version = COALESCE(schedule_version, excluded.schedule_version) "
            "RETURNING attempt, schedule_version",
            (
                rid, request.job, slot_ms(request.slot), request.max_attempts, token,
                request.owner, expires, now_ms, request.schedule_version, failures,
            ),
        ).fetchone()  # fmt: skip
        return Run(
            rid, request.job, request.slot, attempt, token, request.owner,
            schedule_version=version,
        )  # fmt: skip

    @staticmethod
    def _insert_skipped(
        conn: sqlite3.Connection, job: str, slot: datetime, reason: str, now_ms: int
    ) -> bool:
        cursor = conn.execute(
            "INSERT INTO relay_runs (run_id, job, slot_ms, state, reason, finished_ms, updated_ms) "
            "VALUES (?, ?, ?, 'skipped', ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (run_id(job, slot), job, slot_ms(slot), reason, now_ms, now_ms),
        )
        return cursor.rowcount == 1

    # -- connection handling -----------------------------------------------------------------

    def _create_schema(self, may_migrate: bool = True) -> None:
        """Create the schema in a new file, or bring an older one up to :data:`SCHEMA_VERSION`;
        ``may_migrate=False`` (``migrate=false`` in the URL) refuses a file at an older layout
        with :class:`~relay.errors.StoreTooOld` instead, changing nothing."""
        with self._write() as (conn, _):
            version = _installed_version(conn)
            existing = version is not None
            if version is None:  # the base schema, then the migrations that follow it
                for statement in _SCHEMA.split(";"):
                    conn.execute(statement)
                version = _installed_version(conn) or 0
            layout = read_layout(conn, version, SCHEMA_VERSION)
            layout.check(f"SQLite database {self.path}")
            if layout.layout >= SCHEMA_VERSION:  # ours, or a newer one whose floor we meet
                return
            if not may_migrate and existing:  # a new file is created all the same
                raise StoreTooOld(
                    f"SQLite database {self.path} has version {layout.layout}, older than this "
                    f"Relay's {SCHEMA_VERSION}, and the URL says migrate=false: run `relay "
                    "migrate --backend URL` once (it only adds: running instances go on), then "
                    "start this instance again"
                )
            for step in range(layout.layout + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS.get(step, ()):
                    _migrate(conn, statement)
            # Migrations only add: the floor stays where it was (never lowered).
            record_layout(conn, SCHEMA_VERSION, max(FLOOR, layout.min_relay, key=version_key))

    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[tuple[sqlite3.Connection, int]]:
        """One ``BEGIN IMMEDIATE`` transaction; ``durable=False`` never waits for the disk."""
        with self._shared.lock:
            try:
                conn = self._shared.get()
                self._set_synchronous(conn, self._durable if durable else "NORMAL")
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise BackendUnavailable(
                    f"SQLite database {self.path} is unavailable: {exc}"
                ) from exc
            try:
                # Read the clock only once the write lock is held, so steps are ordered by it.
                yield conn, self._now_ms()
            except sqlite3.OperationalError as exc:
                conn.execute("ROLLBACK")
                explained = self._too_new(conn)
                if explained is None:
                    raise
                raise explained from exc
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise BackendUnavailable(f"SQLite commit failed on {self.path}: {exc}") from exc

    def _too_new(self, conn: sqlite3.Connection) -> StoreTooNew | None:
        """Why a statement failed (a table or column gone), if a newer Relay's layout explains
        it: a contraction whose floor is above this Relay."""
        try:
            found = read_layout(conn, _installed_version(conn) or 0, SCHEMA_VERSION)
        except sqlite3.Error:
            return None
        if found.usable():
            return None
        return StoreTooNew(f"SQLite database {self.path}", found.layout, found.min_relay, running())

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._shared.lock:
            try:
                yield self._shared.get()
            except sqlite3.Error as exc:
                raise BackendUnavailable(
                    f"SQLite database {self.path} is unavailable: {exc}"
                ) from exc

    def _set_synchronous(self, conn: sqlite3.Connection, value: str) -> None:
        """Set ``synchronous`` for ``conn``'s next transactions (it may change between them)."""
        if (conn, value) != self._synchronous:
            conn.execute(f"PRAGMA synchronous={value}")
            self._synchronous = (conn, value)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


def _checked_durability(value: str) -> Durability:
    """``value`` if it is a known durability, else a ``ConfigurationError`` naming the choices."""
    if value in DURABILITY:
        return cast(Durability, value)
    raise ConfigurationError(
        f"SQLite durability={value!r} is not known: use 'full' (the default: leases and outcomes "
        "are on disk before a step returns) or 'fast' (an OS crash may undo the last steps)"
    )


def _migrate(conn: sqlite3.Connection, statement: str) -> None:
    """Run one migration statement; a column it adds that exists already is left as it is (SQLite
    has no ``ADD COLUMN IF NOT EXISTS``), so a step can run again on a file that had it."""
    words = statement.split()
    if words[:2] == ["ALTER", "TABLE"] and words[3:5] == ["ADD", "COLUMN"]:
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({words[2]})")}
        if words[5] in columns:
            return
    conn.execute(statement)


def _installed_version(conn: sqlite3.Connection) -> int | None:
    """The schema version of the open database, or None if it holds no Relay schema yet."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'relay_meta'").fetchone() is None:
        return None
    row = conn.execute("SELECT value FROM relay_meta WHERE key = 'schema_version'").fetchone()
    return 1 if row is None else int(row[0])


def _finished_again(conn: sqlite3.Connection, run_id: str, token: int) -> RunState | None:
    """What a finish by ``token`` recorded, if one did (see :func:`finished_again`)."""
    row = conn.execute(
        "SELECT state, reason FROM relay_runs WHERE run_id = ? AND token = ? "
        "AND state <> 'running'",
        (run_id, token),
    ).fetchone()
    return None if row is None else finished_again(row[0], row[1])


def _update_held(conn: sqlite3.Connection, statement: str, params: tuple[Any, ...]) -> None:
    """Run an update guarded by ``_HELD``; raise :class:`LeaseLost` if it changed no row.

    ``params`` end with the run id and the token.
    """
    if conn.execute(statement, params).rowcount != 1:
        run_id, token = params[-2:]
        current = conn.execute(
            "SELECT state, token FROM relay_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        raise lease_lost(run_id, token, None if current is None else (current[0], current[1]))


def _job_row(conn: sqlite3.Connection, job: str) -> tuple[int, int, int | None]:
    """``job``'s last fencing token, its count of live runs and when it was paused (or None).

    0, 0 and None before its first lease.
    """
    row = conn.execute(
        "SELECT token, live, paused_ms FROM relay_runs WHERE run_id = ?", (_job_row_id(job),)
    )
    value = row.fetchone()
    return (0, 0, None) if value is None else (int(value[0]), int(value[1] or 0), value[2])


def _next_token(conn: sqlite3.Connection, job: str, now_ms: int) -> int:
    """``job``'s next fencing token: one more than its last, and at least the clock in µs.

    The floor keeps a token above every one handed out before a crash that lost the last writes
    (the counter went back, the clock did not); a clock that goes back only leaves the counter
    growing by one.
    """
    return max(_job_row(conn, job)[0] + 1, now_ms * 1000)


def _update_job_row(conn: sqlite3.Connection, job: str, token: int, live_change: int) -> None:
    """Record ``token`` as the last handed out for ``job``, and its live runs' count's change."""
    conn.execute(
        "INSERT INTO relay_runs (run_id, job, slot_ms, state, token, live, updated_ms) "
        "VALUES (?1, ?2, 0, 'job', ?3, ?4, 0) "
        "ON CONFLICT (run_id) DO UPDATE SET token = excluded.token, live = live + ?4",
        (_job_row_id(job), job, token, live_change),
    )


def _count_live(conn: sqlite3.Connection, job: str, change: int) -> None:
    """A run of ``job`` became live (+1) or final (-1)."""
    conn.execute(
        "UPDATE relay_runs SET live = live + ? WHERE run_id = ?", (change, _job_row_id(job))
    )


def _live_runs(conn: sqlite3.Connection, job: str, live: int, columns: str = _COLUMNS) -> list[Any]:
    """The ``live`` running and pending runs of ``job``, found from its newest run back."""
    if live <= 0:
        return []
    return conn.execute(
        f"SELECT {columns} FROM relay_runs WHERE run_id > ? AND run_id < ? "
        "AND state IN ('running', 'pending') ORDER BY run_id DESC LIMIT ?",
        (*_job_range(job), live),
    ).fetchall()


_LAST = "\U0010ffff"
"""Sorts after every other character (UTF-8 and code point order agree): ``p + _LAST`` bounds the
names that start with ``p``."""


def _job_row_id(job: str) -> str:
    """The key of ``job``'s job row: just after its runs' ids (see sqlite.sql)."""
    return f"{job}@~"


def _backfill_reason(serial: bool) -> str:
    return BUFFERED if serial else "backfill"


def _has_old_runs(
    conn: sqlite3.Connection, bounds: tuple[str, str], cutoff: int, limit: int
) -> bool:
    """Whether the ``limit`` oldest ids in ``bounds`` hold a run finished before ``cutoff``."""
    return (
        conn.execute(
            "SELECT 1 FROM (SELECT state, finished_ms FROM relay_runs WHERE run_id > ? "
            "AND run_id < ? ORDER BY run_id LIMIT ?) WHERE state IN "
            "('succeeded', 'failed', 'skipped') AND finished_ms < ? LIMIT 1",
            (*bounds, limit, cutoff),
        ).fetchone()
        is not None
    )


def _prune_range(conn: sqlite3.Connection, bounds: tuple[str, str], cutoff: int, limit: int) -> int:
    """Delete the runs among the ``limit`` oldest ids in ``bounds`` that finished before
    ``cutoff``, except the newest (found as in last_slots: the job's latest slot is never pruned).

    Only the oldest ids are looked at, so a call costs at most ``limit`` rows however long the
    history; runs still live among them are left for a later call.
    """
    return conn.execute(
        "DELETE FROM relay_runs WHERE run_id IN (SELECT run_id FROM relay_runs "
        "WHERE run_id > ?1 AND run_id < ?2 ORDER BY run_id LIMIT ?3) "
        "AND state IN ('succeeded', 'failed', 'skipped') AND finished_ms < ?4 "
        "AND slot_ms < (SELECT MAX(slot_ms) FROM (SELECT slot_ms FROM relay_runs "
        "WHERE run_id > ?1 AND run_id < ?2 ORDER BY run_id DESC LIMIT 2))",
        (*bounds, limit, cutoff),
    ).rowcount


def _job_of(run_id: str) -> str:
    """The job a run id names (job names hold no '@')."""
    return run_id.rpartition("@")[0]


def _other_live(conn: sqlite3.Connection, job: str, now_ms: int) -> bool:
    """Another run of ``job`` holds a live lease (asked for a run not recorded yet)."""
    live = _job_row(conn, job)[1]
    return any(run[3] == "running" and run[9] > now_ms for run in _live_runs(conn, job, live))


def _waiting(conn: sqlite3.Connection, job: str) -> bool:
    """A run of ``job`` waits for its live run to end (pending, reason ``buffered``)."""
    live = _job_row(conn, job)[1]
    return any(run[3] == "pending" and run[8] == BUFFERED for run in _live_runs(conn, job, live))


def _context(
    conn: sqlite3.Connection, request: AcquireRequest, stored: StoredRun | None, now_ms: int
) -> dict[str, bool]:
    """What :func:`decide` needs beyond the run: read only when a rule could use it."""
    job = request.job
    if stored is None:
        live = (request.overlap_skip or request.buffer_one) and _other_live(conn, job, now_ms)
        return {
            "other_live": live,
            "paused": _job_row(conn, job)[2] is not None,
            "waiting": live and request.buffer_one and _waiting(conn, job),
        }
    buffered = stored.state is RunState.PENDING and stored.reason == BUFFERED
    return {"other_live": buffered and _other_live(conn, job, now_ms)}


def _insert_run(
    conn: sqlite3.Connection,
    rid: str,
    request: AcquireRequest,
    state: str,
    reason: str | None,
    now_ms: int,
) -> None:
    """Record a run that is not leased: skipped (finished now) or pending (never leased yet)."""
    conn.execute(
        "INSERT INTO relay_runs (run_id, job, slot_ms, state, reason, max_attempts, finished_ms, "
        "updated_ms, schedule_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (run_id) DO NOTHING",
        (rid, request.job, slot_ms(request.slot), state, reason, request.max_attempts,
         now_ms if state == "skipped" else None, now_ms, request.schedule_version),
    )  # fmt: skip


def _add_live(conn: sqlite3.Connection, job: str, change: int) -> None:
    """``change`` more live runs of ``job``, creating its job row if it has none yet."""
    conn.execute(
        "INSERT INTO relay_runs (run_id, job, slot_ms, state, token, live, updated_ms) "
        "VALUES (?1, ?2, 0, 'job', 0, ?3, 0) ON CONFLICT (run_id) DO UPDATE SET live = live + ?3",
        (_job_row_id(job), job, change),
    )


def _job_range(job: str) -> tuple[str, str]:
    """Run ids of ``job`` lie strictly between these (job names hold no '@')."""
    return f"{job}@", _job_row_id(job)


def _slot_range(job: str) -> tuple[str, str]:
    """Ids of ``job``'s slot runs (``job@<digits>…``) lie strictly between these: not manual runs
    (``job@manual:…``, after them), nor its job row."""
    return f"{job}@", f"{job}@:"


def _manual_range(job: str) -> tuple[str, str]:
    """Ids of ``job``'s manual runs lie strictly between these."""
    return f"{job}@{MANUAL}", f"{job}@{MANUAL[:-1]};"


def _record(row: Sequence[Any]) -> RunRecord:
    rid, job, slot, state, attempt, failures, token, owner, reason, expires, started, finished = (
        row[:12]
    )
    return RunRecord(
        id=rid, job=job, scheduled_for=from_ms(slot), state=RunState(state), attempt=attempt,
        failures=failures, token=token, owner=owner, reason=reason,
        expires_at=optional_from_ms(expires), started_at=optional_from_ms(started),
        finished_at=optional_from_ms(finished), error=row[12], schedule_version=row[13],
    )  # fmt: skip


def _instance(
    owner: str,
    role: str,
    host: str,
    pid: int,
    started: int,
    version: str,
    interval: int,
    beat: int,
    expires: int,
    tasks: str | None,
    problem: str | None = None,
    definitions: str | None = None,
) -> InstanceInfo:
    return InstanceInfo(
        owner=owner, role=role, host=host, pid=pid, started_at=from_ms(started), version=version,
        interval=interval / 1000, beat_at=from_ms(beat), expires_at=from_ms(expires),
        tasks=tuple(json.loads(tasks)) if tasks else (), problem=problem,
        **parse_definitions(definitions),
    )  # fmt: skip


def open_wal(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode, shared by threads (each step under a lock), in
    autocommit: steps begin their own transactions."""
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    enable_wal(conn, busy_timeout)
    return conn


def enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch ``conn``'s database to WAL, waiting up to ``timeout`` seconds for other openers.

    SQLite answers "database is locked" at once, without its busy handler, when another process
    holds the file while the journal mode changes: instances started together on a new file would
    otherwise fail to start.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _path_of(parsed: BackendURL) -> str:
    """The file a ``sqlite:///…`` URL names (``sqlite:///a.db``: relative, ``////``: absolute)."""
    return parsed.parts.path[1:] if parsed.parts.path.startswith("/") else parsed.parts.path
