"""PostgreSQL lease backend: ``postgresql://user:password@host:5432/db?schema=relay``.

Every step is one statement in autocommit, so it is one transaction on the run's row:
``acquire_many`` calls a PL/pgSQL function created with the schema, which decides a whole batch in
one round trip; the other steps are single ``UPDATE``/``SELECT`` statements. The server's clock
(``clock_timestamp()``) decides expiry, never the caller's. Nothing lives in the session between
steps (no prepared statements, advisory session locks or temporary tables), so a transaction-mode
pooler such as PgBouncer works in front of the server. The schema is created and migrated on first
use under an advisory transaction lock.
"""

from __future__ import annotations

import json
import math
import re
import select
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cache
from operator import attrgetter
from typing import Any, Literal
from urllib.parse import urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from relay.backends._lost import finished_again, is_held, lease_lost, started_elsewhere
from relay.backends._pg_watchdog import Watchdog
from relay.backends._postgres_replication import (
    ReplicationFacts,
    check_replication,
    replication_facts,
)
from relay.backends._postgres_schedules import PostgresSchedules
from relay.backends._postgres_schema import (
    _LOCK,
    SCHEMA_VERSION,
    check_newer,
    contract,
    grants,
    migrate,
    read_layout,
    record_layout,
    sections,
)
from relay.backends._url import BackendURL
from relay.contract import AcquireRequest, AcquireResult, JobHistory, JobInfo, Outcome
from relay.deadlines import DEFAULT_TIMEOUT, PER_JOB, Deadline, deadline_of
from relay.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseLost,
    NotAcknowledged,
    StoreNotFound,
    StoreTooNew,
)
from relay.instances import InstanceInfo, definitions_json, parse_definitions
from relay.layout import Layout, running
from relay.runs import (
    Run,
    RunRecord,
    RunState,
    check_slots,
    from_ms,
    run_id,
    slot_ms,
    won_run,
)

__all__ = ["SCHEMA_VERSION", "PostgresLeaseBackend"]

UTC = timezone.utc
_OWN_OPTIONS = ("schema", "pool_max", "pool_timeout", "timeout", "require_sync", "migrate")
_WRITABLE_ATTRS = ("read-write", "primary")
_RECONNECT_TIMEOUT = 1.0
# The server's WARNING when a commit's wait for a synchronous standby is cancelled (a cancel
# request): the commit stands on the primary alone, and the statement succeeds.
_UNREPLICATED = "canceling wait for synchronous replication"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_NO_BITMAP = "SET LOCAL enable_bitmapscan = off;\n"
_MISSING = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.InvalidSchemaName,
)

_QUERIES = sections("postgres_queries.sql", "name:")


class PostgresLeaseBackend(PostgresSchedules):
    """Leases as rows of ``<schema>.runs``, one row per job in ``<schema>.jobs``.

    URL options: ``schema`` (default ``relay``; several apps can share a database with one schema
    each), ``pool_max`` (connections per process, default 5), ``timeout`` (seconds, default 2:
    the longest wait for a pooled connection and for each statement's answer, measured here, so
    it holds when packets vanish), ``pool_timeout`` (the wait for a connection, default
    ``timeout``), ``require_sync`` (``1``: refuse a server whose commits do not wait for a
    standby), and any libpq parameter such as ``sslmode``, ``connect_timeout`` (default
    ``timeout``, at least 2: libpq's floor), ``tcp_user_timeout`` (default ``timeout``) or
    ``application_name``.

    A URL may name several hosts (``postgresql://a:5432,b:5432/db``): each connection goes to the
    one that accepts writes (``target_session_attrs=read-write``, the default with several hosts),
    so after a standby's promotion the pool reaches it without a restart.

    ``read_only`` neither creates nor migrates the schema: a schema that does not exist (or holds
    no Relay tables) raises :class:`~relay.errors.StoreNotFound`; ``empty_ok`` (with
    ``read_only``, for ``relay doctor``) opens it all the same, creating nothing: only
    :meth:`durability_facts` may then be called.

    A schema missing or older than this Relay's is created or migrated at open by its owner;
    ``migrate=false`` in the URL (``migrate=False``), or a role that does not own the schema,
    never changes it and raises :class:`~relay.errors.MigrationRequired` naming ``relay migrate``.
    """

    capability: Literal["lease"] = "lease"
    LAYOUT = SCHEMA_VERSION
    """The layout this Relay writes (:mod:`relay.layout`): the schema version."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "relay",
        pool_max: int = 5,
        pool_timeout: float = DEFAULT_TIMEOUT,
        display: str | None = None,
        read_only: bool = False,
        deadline: Deadline | None = None,
        require_sync: bool = False,
        migrate: bool = True,
        empty_ok: bool = False,
    ) -> None:
        self.schema = _checked_schema(schema)
        self._display = display or "PostgreSQL"
        self._timeout = pool_timeout
        self.deadline = deadline
        """How long a call waits for the server (``timeout``), when opened from a URL."""
        statement = DEFAULT_TIMEOUT if deadline is None else deadline.timeout
        self._watchdog = Watchdog(statement, name=f"relay-pg-watchdog-{self.schema}")
        self._queries, self._version, self.found_version = _ensure_schema(
            conninfo, self.schema, self._display, read_only, require_sync, migrate, empty_ok
        )
        """The schema version found at open (0: none); ``relay migrate`` reports it."""
        if self._version < 7:  # read-only on a schema no scheduler of this version opened yet
            self._queries = {
                key: text.replace("error, schedule_version", "error, NULL::integer")
                for key, text in self._queries.items()
            }
        self._many_queries: dict[tuple[str, ...], str] = {}
        """``acquire_many``'s statement for each way of passing its arguments."""
        self._closed = threading.Event()
        self._unreplicated = threading.local()  # a step's notices arrive in its own thread
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(pool_max, 1),
            timeout=pool_timeout,
            kwargs={"autocommit": True, "prepare_threshold": None},
            check=_check_idle,
            configure=lambda conn: conn.add_notice_handler(self._notice),
            name=f"relay-{self.schema}",
            open=True,
            # The pool retries a failed connection after 1, 2, 4, 8… s: after a long outage (a
            # failover) its next try could come long after the server is back. Giving up after
            # a second makes the next step that needs a connection try again at once.
            reconnect_timeout=_RECONNECT_TIMEOUT,
        )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> PostgresLeaseBackend:
        """Open the backend a ``postgresql://`` (or ``postgres://``) URL names."""
        parsed = BackendURL(url)
        parsed.check_options([*_OWN_OPTIONS, *_libpq_keywords()], "the PostgreSQL backend")
        libpq = {k: v for k, v in parsed.options.items() if k not in _OWN_OPTIONS}
        deadline = cls.deadline_for(parsed)
        libpq.setdefault("connect_timeout", str(max(2, math.ceil(deadline.timeout))))
        if "tcp_user_timeout" in _libpq_keywords():  # unacknowledged data ends the connection
            libpq.setdefault("tcp_user_timeout", str(math.ceil(deadline.timeout * 1000)))
        if parsed.multi_host or "," in libpq.get("host", ""):  # a:1,b:2 or ?host=a,b&port=1,2
            _check_session_attrs(parsed, libpq, read_only=bool(kwargs.get("read_only")))
        try:
            conninfo = make_conninfo(urlunsplit(parsed.parts._replace(query="")), **libpq)
        except psycopg.ProgrammingError as exc:
            reason = str(exc).replace(parsed.parts.password or "\0", "***")  # libpq echoes URLs
            raise ConfigurationError(
                f"PostgreSQL URL {parsed.redacted()!r} is malformed ({reason}); "
                "use postgresql://user:password@host:5432/database"
            ) from None
        display = urlunsplit(parsed.parts._replace(query=""))
        display = BackendURL(display).redacted()
        return cls(
            conninfo,
            schema=parsed.option("schema", "relay"),
            pool_max=int(parsed.float_option("pool_max", 5)),
            pool_timeout=parsed.float_option("pool_timeout", deadline.timeout),
            display=display,
            deadline=deadline,
            require_sync=_flag(parsed, "require_sync"),
            **{"migrate": parsed.flag_option("migrate", True), **kwargs},
        )

    @classmethod
    def deadline_for(cls, parsed: BackendURL) -> Deadline:
        """How long one call may wait, as the URL's ``timeout`` sets it (known before opening)."""
        # A call waits for a pooled connection, then for its statement: each up to timeout.
        return deadline_of(parsed, calls=2)

    @property
    def name(self) -> str:
        return f"PostgreSQL ({self._display}, schema {self.schema})"

    def durability_facts(self) -> dict[str, object]:
        """What ``relay doctor`` judges (:mod:`relay.doctor`): ``fsync``, and the replication
        facts (:meth:`replication`). Only reads."""
        with self._connection() as conn:
            row = conn.execute(self._queries["durability"]).fetchone()
        replication = self.replication()
        assert row is not None
        version, fsync = row
        states = [state for _, state in replication.standbys]
        return {
            "store": "postgresql", "version": version,
            "role": "standby" if replication.in_recovery else "primary", "fsync": fsync,
            "synchronous_commit": replication.synchronous_commit,
            "synchronous_standby_names": replication.synchronous_standby_names,
            "standbys": len(states), "standby_names": [n for n, _ in replication.standbys],
            # sync_state is hidden from a user without pg_read_all_stats: unknown, then
            "sync_standbys": None if None in states else replication.sync_standbys,
            "relay_data": self.found_version > 0,
        }  # fmt: skip

    # -- the lease contract ------------------------------------------------------------------

    def acquire(self, request: AcquireRequest) -> AcquireResult:
        rid = request.id
        params = (
            rid, request.job, request.slot, request.owner, request.lease, request.max_attempts,
            request.overlap_skip, request.stale_after, request.buffer_one,
            request.schedule_version,
        )  # fmt: skip
        with self._connection() as conn:
            row = conn.execute(self._queries["acquire_one"], params).fetchone()
        assert row is not None
        return _result(request, rid, *row)

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        if len(requests) < 2:
            return [self.acquire(request) for request in requests]
        ids = _run_ids(requests)
        args, params = _many_arguments(requests, ids)
        query = self._many_queries.get(args)
        if query is None:
            query = self._queries["acquire_many_as"].replace("{args}", ", ".join(args))
            self._many_queries[args] = query
        with self._connection(len(requests)) as conn:
            rows = conn.execute(query, params).fetchall()
        decided: list[Any] = [None] * len(requests)
        for row in rows:
            decided[row[0] - 1] = row
        return [
            _result(request, rid, *row[1:])
            for request, rid, row in zip(requests, ids, decided, strict=True)
        ]

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        params = {"run_id": run_id, "token": token, "owner": owner, "lease": lease}
        with self._connection() as conn:
            row = conn.execute(self._queries["start"], params).fetchone()
            if row is None:
                raise self._lost(conn, run_id, token, owner)
        job, slot, attempt, version = row
        return Run(
            run_id, job, slot.astimezone(UTC), attempt, token, owner, schedule_version=version
        )

    def heartbeat(self, run_id: str, token: int, lease: float) -> None:
        params = {"run_id": run_id, "token": token, "lease": lease}
        with self._connection() as conn:
            row = conn.execute(self._queries["heartbeat"], params).fetchone()
            if row is None or not row[0]:
                raise self._lost(conn, run_id, token)

    def heartbeat_many(
        self, runs: Sequence[tuple[str, int]], lease: float
    ) -> list[LeaseLost | None]:
        """Renew several leases in one statement, each ``(run_id, token)`` as :meth:`heartbeat`
        renews one (:class:`relay.contract.BatchHeartbeat`).

        Returns one entry per run, in order: ``None`` where the lease was renewed, else the
        :class:`~relay.errors.LeaseLost` that :meth:`heartbeat` would have raised (read in a second
        statement, for lost runs only). Like :meth:`heartbeat`, it commits without waiting for
        the disk. One run, the engine's usual round, is renewed by :meth:`heartbeat`'s function,
        whose plan the server keeps: about a third of the server's time of the statement for
        several runs, which is planned at every call.
        """
        if not runs:
            return []
        if len(runs) == 1:
            try:
                self.heartbeat(*runs[0], lease)
            except LeaseLost as lost:
                return [lost]
            return [None]
        ids, tokens = [r[0] for r in runs], [r[1] for r in runs]
        leases = [float(lease)] * len(runs)
        with self._connection(len(runs)) as conn:
            renewed = set(conn.execute(self._queries["heartbeat_many"], (ids, tokens, leases)))
            return [
                None if (rid, token) in renewed else self._lost(conn, rid, token)
                for rid, token in runs
            ]

    def finish(
        self, run_id: str, token: int, *, succeeded: bool, error: str | None = None
    ) -> RunState:
        params = {"run_id": run_id, "token": token, "ok": succeeded, "error": error}
        with self._connection() as conn:
            row = conn.execute(self._queries["finish"], params).fetchone()
            if row is None:
                row = conn.execute(self._queries["finished_again"], params).fetchone()
                again = None if row is None else finished_again(row[0], row[1])
                if again is None:
                    raise self._lost(conn, run_id, token)
                return again
        return RunState(row[0])

    def release(self, run_id: str, token: int) -> None:
        params = {"run_id": run_id, "token": token}
        with self._connection() as conn:
            if conn.execute(self._queries["release"], params).rowcount != 1:
                raise self._lost(conn, run_id, token)

    def skip(self, job: str, slot: datetime, reason: str) -> bool:
        return self.skip_many([(job, slot)], reason)[0]

    def skip_many(self, runs: Sequence[tuple[str, datetime]], reason: str) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        if not runs:
            return []
        # In job order, as acquire_many takes jobs' rows, so that the two never deadlock.
        order = sorted(range(len(runs)), key=lambda i: (runs[i][0].encode(), runs[i][1]))
        params = (
            reason, [run_id(*runs[i]) for i in order], [runs[i][0] for i in order],
            [runs[i][1] for i in order],
        )  # fmt: skip
        with self._connection(len(runs)) as conn:
            rows = conn.execute(self._queries["skip_many"], params).fetchall()
        recorded = [False] * len(runs)
        for position, done in rows:
            recorded[order[position - 1]] = bool(done)
        return recorded

    def last_slot(self, job: str) -> datetime | None:
        return self.last_slots([job])[job]

    def last_slots(self, jobs: Sequence[str]) -> dict[str, datetime | None]:
        with self._connection(len(jobs)) as conn:
            rows = conn.execute(self._queries["last_slots"], (list(jobs),)).fetchall()
        return {job: None if value is None else value.astimezone(UTC) for job, value in rows}

    def job_history(self, jobs: Sequence[str], depth: int) -> dict[str, JobHistory]:
        recent: dict[str, list[RunRecord]] = {job: [] for job in jobs}
        wins: dict[str, RunRecord] = {}
        with self._connection(len(jobs)) as conn:
            rows = conn.execute(self._queries["job_history"], (list(jobs), depth)).fetchall()
        for kind, *row in rows:
            record = _record(row)
            if kind == "s":
                wins[record.job] = record
            else:
                recent[record.job].append(record)
        return {job: JobHistory(tuple(recent[job]), wins.get(job)) for job in jobs}

    def mark_once(self, key: str, ttl: float) -> bool:
        with self._connection() as conn:
            row = conn.execute(self._queries["mark_once"], {"key": key, "ttl": float(ttl)})
            return row.fetchone() is not None

    def reclaimable(self, limit: int = 100) -> list[RunRecord]:
        # Finished runs leave dead entries in the partial index of live runs until vacuum. A
        # bitmap scan (what stale statistics choose) walks them all at every sweep (20,000 after
        # a burst: 2 ms); a plain index scan marks them dead once, then skips them. One round
        # trip: the client binds the limit, the server runs both statements in one transaction,
        # and SET LOCAL ends with it.
        with self._connection() as conn, psycopg.ClientCursor(conn) as cursor:
            cursor.execute(_NO_BITMAP + self._queries["reclaimable"], (limit,))
            cursor.nextset()
            rows = cursor.fetchall()
        return [_record(row) for row in rows]

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        with self._connection() as conn:
            if job is None:
                rows = conn.execute(self._queries["runs"], (limit,)).fetchall()
            else:
                rows = conn.execute(self._queries["runs_of_job"], (job, limit)).fetchall()
        return [_record(row) for row in rows]

    def now(self) -> datetime:
        with self._connection() as conn:
            value = conn.execute(self._queries["now"]).fetchone()[0]  # type: ignore[index]
        return value.astimezone(UTC)  # type: ignore[no-any-return]

    def record_instance(self, info: InstanceInfo, ttl: float) -> None:
        params = {
            "owner": info.owner, "role": info.role, "host": info.host, "pid": info.pid,
            "started_at": info.started_at, "version": info.version,
            "interval": float(info.interval), "ttl": float(ttl),
            "tasks": json.dumps(list(info.tasks)), "problem": info.problem,
            "definitions": definitions_json(info),
        }  # fmt: skip
        with self._connection() as conn:
            conn.execute(self._queries["record_instance"], params)

    def layout(self) -> Layout:
        """The schema's layout record (:mod:`relay.layout`)."""
        with self._connection() as conn:
            return read_layout(conn, self.schema)

    def record_layout(self, layout: Layout) -> None:
        """Write the schema's layout record, and ``meta``'s schema version beside it, under the
        schema's lock (``relay migrate --contract``; tests). Needs the schema's owner."""
        with self._connection() as conn, conn.transaction():
            conn.execute(_LOCK, (self.schema,))
            record_layout(conn, self.schema, layout)

    def contract(self) -> list[str]:
        """``relay migrate --contract``: remove what only Relays older than this one used and
        raise the floor to this release; the statements run. Needs the schema's owner; the
        caller checked the live instances first."""
        with self._connection() as conn:
            return contract(conn, self.schema)[1]

    def instances(self) -> list[InstanceInfo]:
        if self._version < 4:  # read-only on a schema no scheduler of this version opened yet
            return []
        query = self._queries["instances"]
        if self._version < 6:  # no tasks column yet (read-only)
            query = query.replace(", tasks", ", NULL")
        if self._version < 17:  # no problem column yet (read-only)
            query = query.replace("problem,", "NULL,")
        if self._version < 18:  # no definitions column yet (read-only)
            query = query.replace("definitions\n", "NULL\n")
        with self._connection() as conn:
            rows = conn.execute(query).fetchall()
        return [_instance(*row) for row in rows]

    # -- the control plane -------------------------------------------------------------------

    def register_jobs(self, specs: dict[str, str]) -> None:
        names = sorted(specs, key=str.encode)  # rows taken in name order, as acquires take them
        with self._connection(len(names)) as conn:
            conn.execute(self._queries["register_jobs"], (names, [specs[n] for n in names]))

    def jobs(self) -> list[JobInfo]:
        if self._version < 5:  # read-only on a schema no scheduler of this version opened yet
            with self._connection() as conn:
                names = conn.execute(self._queries["job_names"]).fetchall()
            return [JobInfo(name, None) for (name,) in names]
        with self._connection() as conn:
            rows = conn.execute(self._queries["jobs"]).fetchall()
        return [JobInfo(name, spec, _utc(at), by, why) for name, spec, at, by, why in rows]

    def job_page(self, after: str = "", limit: int = 50, prefix: str = "") -> list[JobInfo]:
        if self._version < 5:  # read-only on a schema no scheduler of this version opened yet
            found = [i for i in self.jobs() if i.name > after and i.name.startswith(prefix)]
            return found[:limit]
        # Names are COLLATE "C" (byte order): U+10FFFF sorts after every other character.
        below = prefix + "\U0010ffff"
        params = {"after": after, "prefix": prefix, "below": below, "limit": limit}
        with self._connection() as conn:
            rows = conn.execute(self._queries["job_page"], params).fetchall()
        return [JobInfo(name, spec, _utc(at), by, why) for name, spec, at, by, why in rows]

    def job_infos(self, names: Sequence[str]) -> list[JobInfo]:
        if self._version < 5:
            wanted = set(names)
            return [info for info in self.jobs() if info.name in wanted]
        with self._connection() as conn:
            rows = conn.execute(self._queries["job_infos"], {"names": list(names)}).fetchall()
        return [JobInfo(name, spec, _utc(at), by, why) for name, spec, at, by, why in rows]

    def pause(self, job: str, reason: str, by: str) -> bool:
        params = {"job": job, "reason": reason, "by": by}
        with self._connection() as conn:
            return conn.execute(self._queries["pause"], params).fetchone() is not None

    def resume(self, job: str, catch_up: float | None = None) -> list[str]:
        params = {"job": job, "catch_up": catch_up}
        with self._connection() as conn:
            rows = conn.execute(self._queries["resume"], params).fetchall()
        return sorted(row[0] for row in rows)

    def trigger(self, job: str, overlap_skip: bool = False) -> RunRecord:
        slot = from_ms(slot_ms(self.now()))  # ids name whole milliseconds
        rid = run_id(job, slot, manual=True)
        params = {"run_id": rid, "job": job, "slot": slot, "overlap_skip": overlap_skip}
        with self._connection() as conn:
            conn.execute(self._queries["trigger"], params)
            row = conn.execute(self._queries["run"], (rid,)).fetchone()
        assert row is not None
        return _record(row)

    def backfill(self, job: str, slots: Sequence[datetime], serial: bool = False) -> list[bool]:
        ids = [run_id(job, slot) for slot in slots]
        reason = "buffered" if serial else "backfill"
        with self._connection() as conn:
            rows = conn.execute(
                self._queries["backfill"], (job, reason, ids, list(slots))
            ).fetchall()
        created = {row[0] for row in rows}
        return [rid in created for rid in ids]

    def prune(self, older_than: float, limit: int = 500) -> int:
        params = {"older_than": float(older_than), "limit": limit}
        with self._connection() as conn:
            return conn.execute(self._queries["prune"], params).rowcount

    def replication(self) -> ReplicationFacts:
        """What the server's replication may lose now: its settings and connected standbys."""
        with self._connection() as conn:
            return replication_facts(conn)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._watchdog.close()
            self._pool.close()

    # -- connections and errors --------------------------------------------------------------

    @contextmanager
    def _connection(self, jobs: int = 0) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; driver errors leave as ``BackendUnavailable``, and a commit no
        synchronous standby confirmed as ``NotAcknowledged``. Its statement is cut past the
        deadline, plus :data:`~relay.deadlines.PER_JOB` per job it decides."""
        self._unreplicated.detail = None
        try:
            # getconn and putconn, not the pool's connection(): its block commits (nothing to
            # commit in autocommit, but a call into the driver) and keeps statistics, a few µs a
            # step; putconn rolls back a connection left in a transaction all the same.
            conn = self._pool.getconn()
            try:
                with self._watchdog.watch(conn.pgconn.socket, jobs * PER_JOB) as w:
                    try:
                        yield conn
                    except psycopg.errors.ReadOnlySqlTransaction:
                        conn.close()  # a standby's: the pool discards it and connects anew
                        raise
                    except psycopg.OperationalError as exc:
                        if w.cut:
                            raise self._no_answer() from exc
                        raise
            finally:
                self._pool.putconn(conn)
        except _MISSING as exc:
            raise self._missing(exc) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise _not_granted(exc, self.schema, self._display) from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise self._read_only_server(exc) from exc
        except PoolTimeout as exc:
            raise BackendUnavailable(
                f"no connection to PostgreSQL at {self._display} within {self._timeout:g}s; "
                "check that the server is up and reachable (URL option timeout waits longer)"
            ) from exc
        except psycopg.Error as exc:
            raise BackendUnavailable(
                f"PostgreSQL at {self._display} failed: {_first_line(exc)}; "
                "check that the server is up and reachable"
            ) from exc
        if self._unreplicated.detail is not None:
            raise NotAcknowledged(
                f"PostgreSQL at {self._display} committed a step that no synchronous standby "
                f"confirmed (its wait was cancelled: {self._unreplicated.detail}); a failover now "
                "would lose it, so it counts as not done"
            )

    def _missing(self, exc: psycopg.Error) -> BackendError:
        """What a missing table or function means: a layout this Relay can no longer use (a
        newer Relay contracted the schema), else a schema dropped or not migrated."""
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                layout = read_layout(conn, self.schema)
        except (psycopg.Error, PoolTimeout):
            layout = None
        if layout is not None and not layout.usable():
            return StoreTooNew(
                f"schema {self.schema!r}", layout.layout, layout.min_relay, running()
            )
        return BackendUnavailable(
            f"Relay's tables or functions are missing from schema {self.schema!r} on "
            f"{self._display} ({_first_line(exc)}): run `relay migrate --backend URL` as the "
            "schema's owner, or reopen the backend to create them again"
        )

    def _notice(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        """Note a commit that stands on the primary alone, for the step that made it."""
        if (diagnostic.message_primary or "").startswith(_UNREPLICATED):
            self._unreplicated.detail = diagnostic.message_detail or diagnostic.message_primary

    def _read_only_server(self, exc: psycopg.Error) -> BackendUnavailable:
        """A write reached a standby (or a demoted primary), over a connection now closed."""
        return BackendUnavailable(
            f"PostgreSQL at {self._display} refused a write, as a standby does "
            f"({_first_line(exc)}); Relay reconnects: list every server in the URL "
            "(postgresql://a:5432,b:5432/db) with target_session_attrs=read-write"
        )

    def _no_answer(self) -> BackendUnavailable:
        return BackendUnavailable(
            f"PostgreSQL at {self._display} did not answer within {self._watchdog.timeout:g}s; "
            "check that the server is up and reachable (URL option timeout waits longer)"
        )

    def _lost(
        self, conn: psycopg.Connection[Any], run_id: str, token: int, owner: str | None = None
    ) -> LeaseLost:
        """Why a step on ``run_id`` with ``token`` changed nothing (a second, read-only look)."""
        row = conn.execute(self._queries["lost"], (run_id,)).fetchone()
        found = None if row is None else (row[0], row[1])
        if row is None or not is_held(found, token):
            return lease_lost(run_id, token, found)
        started_by, started_at = row[2:]
        if owner is not None and started_at is not None and started_by != owner:
            return started_elsewhere(run_id, token, started_by)
        return LeaseLost(f"run {run_id} changed while we looked; token {token} is not ours to use")


def _ensure_schema(
    conninfo: str,
    schema: str,
    display: str,
    read_only: bool,
    require_sync: bool = False,
    may_migrate: bool = True,
    empty_ok: bool = False,
) -> tuple[dict[str, str], int, int]:
    """Check, create or migrate the schema on a direct connection: queries, version, version found.

    A direct connection (not the pool) so that a refused login surfaces as its real cause.
    ``read_only`` checks that the schema exists (``empty_ok``: or not) and changes nothing. A
    writer also checks what the server's replication may lose (``require_sync``: refuse,
    otherwise warn). A schema at this Relay's version is only read, whoever connects: an instance
    without the owner's rights issues no DDL.
    """
    try:
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
            layout = read_layout(conn, schema)
            found = version = layout.layout
            if read_only:
                if not (empty_ok and version == 0):
                    _check_readable(conn, schema, display, layout)
            else:
                check_newer(schema, layout)
                facts = replication_facts(conn)
                check_replication(facts, require_sync=require_sync, display=display)
                if version < SCHEMA_VERSION:
                    found = migrate(conn, schema, display, allowed=may_migrate)
                version = SCHEMA_VERSION  # a newer layout whose floor we meet: used as ours
            queries = {
                key: sql.SQL(text)
                .format(schema=sql.Identifier(schema), args=sql.SQL("{args}"))
                .as_string(conn)
                for key, text in _QUERIES.items()
            }
            return queries, version, found
    except psycopg.OperationalError as exc:
        raise _connect_error(exc, display) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise _not_granted(exc, schema, display) from exc
    except psycopg.Error as exc:
        raise BackendUnavailable(
            f"could not open Relay's schema {schema!r} on {display}: {_first_line(exc)}; "
            "check that the server is up and reachable"
        ) from exc


def _check_readable(
    conn: psycopg.Connection[Any], schema: str, display: str, layout: Layout
) -> None:
    """Refuse a schema that is missing, holds no Relay tables or needs a newer Relay."""
    if layout.layout == 0:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        what = "holds no Relay tables" if found.fetchone() else "does not exist"
        standby = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        lag = (
            " yet: this server is a standby, which may not have replayed a schema just created "
            "on its primary (try again, or read the primary)"
            if standby is not None and standby[0]
            else ""
        )
        raise StoreNotFound(
            f"schema {schema!r} {what} on {display}{lag}; check ?schema= in the URL "
            "(read-only commands never create it)"
        )
    check_newer(schema, layout)


def _not_granted(exc: psycopg.Error, schema: str, display: str) -> BackendUnavailable:
    """A privilege the connected role lacks, with the grants a Relay role needs."""
    return BackendUnavailable(
        f"PostgreSQL at {display} refused Relay for lack of a privilege ({_first_line(exc)}): "
        f"as the schema's owner, run {' '.join(grants(schema, '<role>', '<owner>'))} "
        "(read-only commands need only USAGE and SELECT; see Relay's docs/security.md). A schema "
        "that holds no Relay tables yet is created first by `relay migrate --backend URL`, run "
        "as its owner"
    )


def _connect_error(exc: psycopg.OperationalError, display: str) -> BackendUnavailable:
    """The refused connection as a ``BackendUnavailable`` whose message names the fix."""
    message = str(exc)
    if "does not exist" in message and "database" in message:
        fix = "create the database (createdb NAME) or fix the database name in the URL"
    elif "role" in message and "does not exist" in message:
        fix = "fix the user name in the URL, or create the role (CREATE ROLE name LOGIN PASSWORD …)"
    elif "authentication failed" in message or "no pg_hba.conf entry" in message:
        fix = "check the user and password in the URL and the server's pg_hba.conf"
    elif "invalid" in message:
        return BackendUnavailable(
            f"PostgreSQL URL {display!r} was refused: {_first_line(exc)}; fix the URL"
        )
    elif "session is read-only" in message:
        fix = (
            "no server in the URL takes writes now (each is a standby, or a promotion is under "
            "way): name the primary in the URL, or wait for the failover to end"
        )
    else:
        fix = "check that the server is running and reachable at the URL's host and port"
    return BackendUnavailable(f"cannot connect to PostgreSQL at {display}: {_reason(exc)}; {fix}")


def _reason(exc: psycopg.Error) -> str:
    """The first line of a driver error, or with several hosts what each one answered."""
    hosts = re.findall(r"^- host: '([^']*)', port: '([^']*)'.*failed: (.*)$", str(exc), re.M)
    if len(hosts) < 2:
        return _first_line(exc)
    return "; ".join(f"{host}:{port} {why.strip()}" for host, port, why in hosts)


def _check_session_attrs(parsed: BackendURL, libpq: dict[str, str], *, read_only: bool) -> None:
    """With several hosts, connect to the one that takes writes; refuse a writer told otherwise."""
    attrs = libpq.setdefault("target_session_attrs", "read-write")
    if not read_only and attrs not in _WRITABLE_ATTRS:
        raise ConfigurationError(
            f"PostgreSQL URL {parsed.redacted()!r} names several hosts with "
            f"target_session_attrs={attrs}: a scheduler may land on a standby, which refuses "
            "writes; use target_session_attrs=read-write (the default with several hosts)"
        )


def _flag(parsed: BackendURL, name: str) -> bool:
    """A yes/no URL option (``1``/``0``, ``yes``/``no``, ``true``/``false``)."""
    value = parsed.option(name, "0").lower()
    if value not in ("yes", "true", "1", "no", "false", "0"):
        raise ConfigurationError(f"URL option {name}={value!r} must be 1 or 0 (yes or no)")
    return value in ("yes", "true", "1")


def _check_idle(conn: psycopg.Connection[Any]) -> None:
    """Refuse a pooled connection the server already closed, without a round trip.

    An idle connection has nothing to read; a server that restarted has written its goodbye (or
    closed the socket), so a readable socket means the connection is gone. It is closed here so
    that the pool discards it and opens a new one, instead of offering it again.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if _readable(conn.pgconn.socket):
        conn.close()
        raise psycopg.OperationalError("the server closed this connection")


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read right now (``poll``: no limit on descriptor numbers)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


@cache
def _libpq_keywords() -> tuple[str, ...]:
    """The parameters libpq accepts, which may be passed through as URL options."""
    return tuple(
        option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults() if option.keyword
    )


def _checked_schema(schema: str) -> str:
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(
            f"schema name {schema!r} is not usable: use lowercase letters, digits and "
            "underscores, starting with a letter, such as ?schema=relay or ?schema=myapp_relay"
        )
    return schema


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


_SEPARATOR = "\x1f"
"""Joins the texts of a batch into one parameter: a control character, which no job name holds."""
# acquire_many's arguments after the run ids and jobs: the type and each request's value.
_MANY_COLUMNS: tuple[tuple[str, Callable[[AcquireRequest], object]], ...] = (
    ("timestamptz", attrgetter("slot")),
    ("text", attrgetter("owner")),
    ("float8", lambda r: float(r.lease)),
    ("integer", attrgetter("max_attempts")),
    ("boolean", attrgetter("overlap_skip")),
    ("float8", lambda r: None if r.stale_after is None else float(r.stale_after)),
    ("boolean", attrgetter("buffer_one")),
    ("integer", attrgetter("schedule_version")),
)


def _run_ids(requests: Sequence[AcquireRequest]) -> list[str]:
    """Each request's :attr:`~relay.contract.AcquireRequest.id`, each slot formatted once: the
    requests of one tick share a few slots."""
    stamps: dict[tuple[datetime, bool], str] = {}
    ids = []
    for request in requests:
        key = (request.slot, request.manual)
        stamp = stamps.get(key)
        if stamp is None:
            stamp = stamps[key] = run_id("", request.slot, manual=request.manual)  # "@…"
        ids.append(request.job + stamp)
    return ids


def _many_arguments(
    requests: Sequence[AcquireRequest], ids: list[str]
) -> tuple[tuple[str, ...], list[object]]:
    """``acquire_many``'s ten arguments as SQL, and their parameters, cheap to encode.

    psycopg encodes an array element by element in Python (about 2 µs each), so a column that
    holds one value for every request passes that value once (``array_fill``), and a column of
    texts passes one text joined at :data:`_SEPARATOR`, split by the server; a text that holds
    the separator itself (no job name or run id can) falls back to an array.
    """
    count = len(requests)
    args: list[str] = []
    params: list[object] = []

    def column(kind: str, values: list[Any]) -> None:
        if values.count(values[0]) == count:
            args.append(f"array_fill(%b::{kind}, ARRAY[%b::integer])")
            params.extend((values[0], count))
        elif kind == "text" and (joined := _SEPARATOR.join(values)).count(_SEPARATOR) == count - 1:
            args.append("string_to_array(%s::text, chr(31))")
            params.append(joined)
        else:
            args.append(f"%b::{kind}[]")
            params.append(values)

    column("text", ids)
    column("text", [r.job for r in requests])
    for kind, value in _MANY_COLUMNS:
        column(kind, [value(r) for r in requests])
    return tuple(args), params


_UNWON = {
    outcome.value: AcquireResult(outcome) for outcome in Outcome if outcome is not Outcome.WON
}


def _result(
    request: AcquireRequest,
    rid: str,
    outcome: str,
    attempt: int | None,
    token: int | None,
    version: int | None,
) -> AcquireResult:
    unwon = _UNWON.get(outcome)
    if unwon is not None:
        return unwon  # results are frozen: one of each is enough for a large batch
    assert attempt is not None and token is not None
    # won_run, not Run(...): a tick builds thousands of these.
    return AcquireResult(
        Outcome.WON, won_run(rid, request.job, request.slot, attempt, token, request.owner, version)
    )


def _record(row: Sequence[Any]) -> RunRecord:
    rid, job, slot, state, attempt, failures, token, owner, reason, expires, started, finished = (
        row[:12]
    )
    return RunRecord(
        id=rid, job=job, scheduled_for=slot.astimezone(UTC), state=RunState(state),
        attempt=attempt, failures=failures, token=token, owner=owner, reason=reason,
        expires_at=_utc(expires), started_at=_utc(started), finished_at=_utc(finished),
        error=row[12], schedule_version=row[13],
    )  # fmt: skip


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _instance(
    owner: str,
    role: str,
    host: str,
    pid: int,
    started: datetime,
    version: str,
    interval: float,
    beat: datetime,
    expires: datetime,
    tasks: str | None,
    problem: str | None = None,
    definitions: str | None = None,
) -> InstanceInfo:
    return InstanceInfo(
        owner=owner, role=role, host=host, pid=pid, started_at=started.astimezone(UTC),
        version=version, interval=interval, beat_at=beat.astimezone(UTC),
        expires_at=expires.astimezone(UTC), tasks=tuple(json.loads(tasks)) if tasks else (),
        problem=problem, **parse_definitions(definitions),
    )  # fmt: skip
