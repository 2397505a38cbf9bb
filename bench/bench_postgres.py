"""Benchmark the PostgreSQL lease backend against a raw ``INSERT … ON CONFLICT DO NOTHING``.

Usage: ``python bench/bench_postgres.py [URL]`` (default: ``RELAY_TEST_POSTGRES_URL`` or
``postgresql://postgres@127.0.0.1:5432/test``). Everything runs in a fresh schema that is dropped
at the end. It prints figures and ratios; targets: each lease step within 1.5x of the raw insert,
and a tick of 10,000 due jobs raced by 3 processes within 3x the same race of one batched raw
``INSERT … ON CONFLICT DO NOTHING`` per process (the absolute time beside it), every run claimed
exactly once.
It also gives the server's own planning and execution time per step against the raw insert's
(``pg_stat_statements``, on a PostgreSQL server the benchmark starts with it preloaded, so the
shared server's configuration is left alone), what each acquire writes there (rows inserted and
updated, ``pg_stat_user_tables``; WAL bytes, ``pg_current_wal_lsn()``), and the same acquire on a
schema left at version 7 (before an acquire wrote one row) beside today's, in the same run.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, ratio_at_most  # noqa: E402
from relay.backends._postgres_schema import _MIGRATIONS, migrate, sections  # noqa: E402
from relay.backends.postgres import PostgresLeaseBackend  # noqa: E402
from relay.contract import AcquireRequest, Outcome  # noqa: E402

UTC = timezone.utc
STEPS = 1000
JOBS = 10_000
INSTANCES = 3
BEFORE = 7
"""The schema version before an acquire wrote one row per new run (version 8)."""
TICK_SLOTS = datetime.now(UTC).replace(second=0, microsecond=0)
"""The tick's slots: ``minute`` minutes before this (:func:`tick_race`), the same in every race of
one benchmark run."""
TICK_BEFORE = 8
"""The version of ``acquire_many`` before racing instances stopped writing once the first had won
a tick (version 9); the tick is raced with it too, in the same run."""
ACQUIRE = sections("postgres_queries.sql", "name:")["acquire_one"]
HEARTBEAT_BEFORE = """UPDATE {schema}.runs SET
    expires_at = clock_timestamp() + %(lease)s::float8 * interval '1 second',
    updated_at = clock_timestamp()
WHERE run_id = %(run_id)s AND token = %(token)s AND state = 'running'
  AND set_config('synchronous_commit', 'off', true) = 'off'"""
"""The heartbeat before version 16 made it a function: a top-level UPDATE, planned at every call."""


def _url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def at_version(conn: psycopg.Connection[Any], schema: str, version: int) -> str:
    """Create ``schema`` as migrations 1 to ``version`` leave it; the acquire statement on it."""
    conn.execute(f'CREATE SCHEMA "{schema}"')
    conn.execute(f'CREATE TABLE "{schema}".meta (key text PRIMARY KEY, value text NOT NULL)')
    for number in range(1, version + 1):
        conn.execute(_MIGRATIONS[number].replace("{schema}", f'"{schema}"').encode())
    return ACQUIRE.replace("{schema}", f'"{schema}"')


def _acquire_params(n: int, first: datetime) -> tuple[object, ...]:
    request = AcquireRequest("bench", first + timedelta(seconds=n), "b", 30)
    return (request.id, "bench", request.slot, "b", 30.0, 1, False, None, False, None)


def steps(
    base: str, schema: str, backend: PostgresLeaseBackend, count: int = STEPS
) -> dict[str, float]:
    """Median seconds of a raw insert and of acquire, start, heartbeat (alone, and as the engine
    sends one: ``heartbeat_many`` of one run) and finish, interleaved.

    The baseline is one autocommit ``INSERT … ON CONFLICT DO NOTHING`` per run on a connection of
    its own; each loop runs it and the four lease steps of a fresh run back to back, so a burst of
    load on the shared machine hits both alike.
    """
    first = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)
    names = (
        "raw", "acquire", "start", "heartbeat", "heartbeat_many of one run (the engine's)",
        "finish", "acquire SQL, schema 7", "acquire SQL",
    )  # fmt: skip
    samples: dict[str, list[float]] = {name: [] for name in names}
    with (
        psycopg.connect(base, autocommit=True, prepare_threshold=None) as conn,
        psycopg.connect(base, autocommit=True, prepare_threshold=None) as other,
    ):
        conn.execute(f'CREATE TABLE "{schema}".raw_claims (run_id text PRIMARY KEY)')
        query = f'INSERT INTO "{schema}".raw_claims (run_id) VALUES (%s) ON CONFLICT DO NOTHING'
        before = at_version(other, f"{schema}_v{BEFORE}", BEFORE)
        now = ACQUIRE.replace("{schema}", f'"{schema}"')
        for n in range(count):
            t0 = time.perf_counter()
            conn.execute(query, (f"job@{n}",))
            t1 = time.perf_counter()
            result = backend.acquire(AcquireRequest("bench", first + timedelta(seconds=n), "b", 30))
            t2 = time.perf_counter()
            assert result.run is not None
            backend.start(result.run.id, result.run.token, "b", 30)
            t3 = time.perf_counter()
            backend.heartbeat(result.run.id, result.run.token, 30)
            t4 = time.perf_counter()
            backend.heartbeat_many([(result.run.id, result.run.token)], 30)
            t4b = time.perf_counter()
            backend.finish(result.run.id, result.run.token, succeeded=True)
            t5 = time.perf_counter()
            # The same statement on a connection of its own (each step here starts on another
            # connection than the step before, as the raw insert and the backend's do), on a
            # schema at version 7 and on today's: the acquire before and after version 8, in the
            # same loop, taking turns at going first.
            pair = [(before, _acquire_params(n, first)), (now, _acquire_params(n + count, first))]
            spent = []
            for statement, params in pair if n % 2 else pair[::-1]:
                t6 = time.perf_counter()
                other.execute(statement, params).fetchone()
                spent.append(time.perf_counter() - t6)
            old, new = spent if n % 2 else spent[::-1]
            times = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4b - t4, t5 - t4b, old, new)
            for name, seconds in zip(names, times, strict=True):
                samples[name].append(seconds)
        other.execute(f'DROP SCHEMA "{schema}_v{BEFORE}" CASCADE')
    return {name: statistics.median(values) for name, values in samples.items()}


def batched_heartbeat(backend: PostgresLeaseBackend, count: int, size: int = 10) -> float:
    """Median seconds per run of ``heartbeat_many`` renewing ``size`` runs in one statement."""
    first = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    held = [backend.acquire(AcquireRequest(f"hb-{n}", first, "b", 30)).run for n in range(size)]
    items = [(run.id, run.token) for run in held if run is not None]
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        lost = backend.heartbeat_many(items, 30.0)
        samples.append((time.perf_counter() - t0) / size)
        assert lost == [None] * size
    return statistics.median(samples)


def server_time(count: int, rounds: int = 20) -> tuple[dict[str, float], dict[str, Writes]]:
    """Median over ``rounds`` of the server's execution time per step, in milliseconds, and what
    ``count`` acquires write (:func:`writes`).

    On a server of the benchmark's own with ``pg_stat_statements`` preloaded: each round runs
    ``count / rounds`` raw inserts, then acquires, starts, heartbeats and finishes as many runs,
    each batch between ``pg_stat_statements_reset()`` and the sum of its top-level statements'
    ``total_plan_time`` and ``total_exec_time`` (planning and the executor, not the commit's
    flush), divided by the steps. Planning counts: the backend prepares nothing, so a top-level
    statement is planned at every call, while a PL/pgSQL function's statements keep their plans.
    """
    from tests.backends.pg_server import OwnPostgres, find_bin

    class StatsPostgres(OwnPostgres):
        def start(self) -> None:
            self._pg_ctl("start", "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 "
                         f"-c unix_socket_directories={self.root} -c fsync=off "
                         "-c shared_preload_libraries=pg_stat_statements "
                         "-c pg_stat_statements.track_planning=on")  # fmt: skip

    bindir = find_bin()
    if bindir is None:
        raise RuntimeError("no initdb / pg_ctl on this machine")
    server = StatsPostgres(bindir)
    server.start()
    try:
        millis = _server_rounds(server.url, max(1, count // rounds), rounds)
        return millis, writes(server.url, count)
    finally:
        server.stop()


Writes = dict[str, float]


def writes(base: str, count: int) -> dict[str, Writes]:
    """Per step, on the benchmark's own server (no other writer): rows inserted, updated and
    HOT-updated in every table (``pg_stat_user_tables``), and WAL bytes (``pg_current_wal_lsn()``),
    for the raw insert and the acquire of a new run, on a schema at version 7 and on today's."""
    first = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=2)
    found: dict[str, Writes] = {}
    with psycopg.connect(base, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("CREATE TABLE raw_writes (run_id text PRIMARY KEY)")
        raw = "INSERT INTO raw_writes (run_id) VALUES (%s) ON CONFLICT DO NOTHING"
        before = at_version(conn, "writes_v7", BEFORE)
        migrate(conn, "writes_now", "the benchmark's server", allowed=True)  # today's schema
        now = ACQUIRE.replace("{schema}", '"writes_now"')
        for statement in (before, now):  # the job's row exists, as once its scheduler started
            conn.execute(statement, _acquire_params(-1, first))
        steps: dict[str, Callable[[int], object]] = {
            "raw INSERT": lambda n: conn.execute(raw, (f"job@{n}",)),
            f"acquire, schema {BEFORE}": lambda n: conn.execute(before, _acquire_params(n, first)),
            "acquire": lambda n: conn.execute(now, _acquire_params(n, first)),
        }
        for step, call in steps.items():
            conn.execute("SELECT pg_stat_force_next_flush()")  # this connection's writes so far
            rows_before, lsn = _counters(conn)
            for n in range(count):
                call(n)
            conn.execute("SELECT pg_stat_force_next_flush()")  # flushed once this one ends
            rows_after, lsn_after = _counters(conn)
            found[step] = {
                key: (rows_after[key] - rows_before[key]) / count for key in rows_before
            } | {"wal": (lsn_after - lsn) / count}
    print(f"written per step ({count:,} steps; pg_stat_user_tables, WAL from pg_current_wal_lsn):")
    for step, figures in found.items():
        print(f"  {step:<16} " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    return found


def _counters(conn: psycopg.Connection[Any]) -> tuple[dict[str, int], int]:
    """Rows inserted, updated, HOT-updated in every user table, and the WAL position in bytes."""
    row = conn.execute(
        "SELECT sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_hot_upd),"
        " pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_user_tables"
    ).fetchone()
    assert row is not None
    ins, upd, hot, lsn = (int(value or 0) for value in row)
    return {"inserted": ins, "updated": upd, "HOT": hot}, lsn


def _server_rounds(base: str, per_round: int, rounds: int) -> dict[str, float]:
    first = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)
    backend = PostgresLeaseBackend.from_url(_url(base, "bench"))
    pair = (f"acquire, schema {BEFORE} (fresh table)", "acquire, today's schema (fresh table)")
    old_heartbeat = "heartbeat, before version 16 (a top-level UPDATE)"
    many = "heartbeat_many of one run (the engine's heartbeat)"
    old_many = "heartbeat_many of one run, before version 16 (the statement for several runs)"
    figures: dict[str, list[float]] = {
        "raw": [], "acquire": [], "start": [], "heartbeat": [], old_heartbeat: [], many: [],
        old_many: [], "finish": [], pair[0]: [], pair[1]: [],
    }  # fmt: skip
    with psycopg.connect(base, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute('CREATE TABLE "bench".raw_claims (run_id text PRIMARY KEY)')
        query = 'INSERT INTO "bench".raw_claims (run_id) VALUES (%s) ON CONFLICT DO NOTHING'
        # Before and after version 8 alike: the statement alone, on a table only acquires wrote
        # (the backend's table also holds the finishes' row versions).
        before = at_version(conn, f"bench_v{BEFORE}", BEFORE)
        migrate(conn, "bench_now", "the benchmark's server", allowed=True)
        now = ACQUIRE.replace("{schema}", '"bench_now"')
        runs: list[Any] = []
        steps: dict[str, Callable[[int], object]] = {
            "raw": lambda n: conn.execute(query, (f"job@{n}",)),
            "acquire": lambda n: runs.append(
                backend.acquire(AcquireRequest("bench", first + timedelta(seconds=n), "b", 30)).run
            ),
            "start": lambda n: backend.start(runs[n].id, runs[n].token, "b", 30),
            "heartbeat": lambda n: backend.heartbeat(runs[n].id, runs[n].token, 30),
            old_heartbeat: lambda n: conn.execute(
                HEARTBEAT_BEFORE.replace("{schema}", '"bench"'),
                {"run_id": runs[n].id, "token": runs[n].token, "lease": 30},
            ),
            many: lambda n: backend.heartbeat_many([(runs[n].id, runs[n].token)], 30),
            old_many: lambda n: conn.execute(
                backend._queries["heartbeat_many"], ([runs[n].id], [runs[n].token], [30.0])
            ),
            "finish": lambda n: backend.finish(runs[n].id, runs[n].token, succeeded=True),
            pair[0]: lambda n: conn.execute(before, _acquire_params(n, first)),
            pair[1]: lambda n: conn.execute(now, _acquire_params(n, first)),
        }
        for r in range(rounds):
            for step, call in steps.items():
                conn.execute("SELECT pg_stat_statements_reset()")
                for n in range(r * per_round, (r + 1) * per_round):
                    call(n)
                row = conn.execute(
                    "SELECT coalesce(sum(total_plan_time + total_exec_time), 0)"
                    " FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'"
                ).fetchone()
                figures[step].append(float(row[0] if row else 0) / per_round)
    backend.close()
    millis = {step: statistics.median(values) for step, values in figures.items()}
    print(
        f"server's planning + execution time per step (pg_stat_statements, median of {rounds}"
        " rounds):"
    )
    for step, value in millis.items():
        print(f"  {step:<40} {value * 1e3:7.1f} us   {value / millis['raw']:.2f}x raw INSERT")
    return millis


def install_tick_before(base: str, schema: str) -> None:
    """Add version 8's ``acquire_many`` to ``schema`` as ``acquire_many_v8`` (the tick before)."""
    text = _MIGRATIONS[TICK_BEFORE]
    start = text.index("CREATE OR REPLACE FUNCTION {schema}.acquire_many(")
    body = text[start : text.index("$$;", start) + 3]
    body = body.replace(".acquire_many(", ".acquire_many_v8(", 1)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(body.replace("{schema}", f'"{schema}"').encode())


def tick_race(
    url: str, minute: int, before: bool = False
) -> tuple[float, Counter[str], list[float]]:
    """3 processes each decide the same 10,000 due runs in one acquire_many; wall time and wins.

    ``before``: with version 8's ``acquire_many`` (:func:`install_tick_before`), each won run's
    ``lost`` event made at once as it was before it was made on first access."""
    # One slot for the three, fixed here: a minute that turns during a race changes nothing.
    slot = int(TICK_SLOTS.timestamp()) - 60 * minute
    start_at = time.time() + 3
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--instance", url, f"i{n}", str(start_at), str(slot)]
            + (["before"] if before else []),
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(INSTANCES)
    ]
    reports = [json.loads(proc.communicate(timeout=300)[0]) for proc in procs]
    wins = Counter(run for report in reports for run in report["won"])
    wall = max(report["done"] for report in reports) - start_at
    return wall, wins, [report["took"] for report in reports]


def raw_race(base: str, schema: str) -> float:
    """The tick's raw baseline: 3 processes each insert the same 10,000 run ids in one batched
    ``INSERT … ON CONFLICT DO NOTHING``, at the same moment; the wall time, as for the tick."""
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{schema}".raw_tick')  # each race on a new table
        conn.execute(f'CREATE TABLE "{schema}".raw_tick (run_id text PRIMARY KEY)')
    start_at = time.time() + 3
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--raw", base, schema, str(start_at)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(INSTANCES)
    ]
    reports = [json.loads(proc.communicate(timeout=300)[0]) for proc in procs]
    wall = max(report["done"] for report in reports) - start_at
    won = sum(report["won"] for report in reports)
    print(f"raw baseline: {JOBS:,} ids in one batched INSERT … ON CONFLICT by {INSTANCES} "
          f"processes: wall {wall:.3f} s, {won:,} rows for {JOBS:,} ids")  # fmt: skip
    return float(wall)


def raw_instance(base: str, schema: str, start_at: float) -> None:
    """One racer of the raw baseline."""
    ids = [f"job-{n:05d}@slot" for n in range(JOBS)]
    query = (
        f'INSERT INTO "{schema}".raw_tick (run_id) SELECT unnest(%s::text[]) '
        "ON CONFLICT DO NOTHING RETURNING run_id"
    )
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("SELECT 1")  # connected before the race starts
        time.sleep(max(0.0, start_at - time.time()))
        won = len(conn.execute(query, (ids,)).fetchall())
    print(json.dumps({"won": won, "done": time.time()}))


class Ticks(NamedTuple):
    """The tick raced ``rounds`` times each way: wall times, and whether every round claimed every
    run exactly once."""

    before: list[float]
    after: list[float]
    raw: list[float]
    once_before: bool
    once_after: bool


def tick_rounds(base: str, schema: str, rounds: int) -> Ticks:
    """The 10,000-due tick before version 9 and today, and the raw race, each ``rounds`` times,
    taking turns (the first of a round alternates), each on new runs of jobs that exist."""
    url = _url(base, schema)
    install_tick_before(base, schema)
    tick_race(url, 59)  # the jobs' rows made, so every tick below finds them
    ticks = Ticks([], [], [], True, True)
    for k in range(rounds):
        for before in (True, False) if k % 2 == 0 else (False, True):
            wall, wins, _ = tick_race(url, 2 * k + 1 + before, before=before)
            once = sorted(set(wins.values())) == [1] and len(wins) == JOBS
            if not once:
                most = max(wins.values(), default=0)
                print(f"tick ({'before' if before else 'today'}): {len(wins):,} runs won of "
                      f"{JOBS:,}, one won {most} times at most")  # fmt: skip
            (ticks.before if before else ticks.after).append(wall)
            ticks = ticks._replace(
                once_before=ticks.once_before and (once or not before),
                once_after=ticks.once_after and (once or before),
            )
        ticks.raw.append(raw_race(base, schema))
    for name, walls in (("before", ticks.before), ("today", ticks.after), ("raw", ticks.raw)):
        print(f"tick, {name}: " + ", ".join(f"{wall:.3f} s" for wall in walls))
    return ticks


def history_tick(base: str, history: int, rounds: int) -> tuple[float, float]:
    """Median seconds of one ``acquire_many`` of 10,000 new runs (one process) on a table that
    already holds ``history`` finished runs, with version 8's function and with today's, taking
    turns: how the reads of the settled runs scale with the table."""
    schema = f"relay_bench_{secrets.token_hex(4)}"
    backend = PostgresLeaseBackend.from_url(_url(base, schema))
    try:
        install_tick_before(base, schema)
        old = PostgresLeaseBackend.from_url(_url(base, schema))
        queries = old._queries  # version 8's function, as in instance()
        for key in ("acquire_many", "acquire_many_as"):
            queries[key] = queries[key].replace(".acquire_many(", ".acquire_many_v8(", 1)
        first = TICK_SLOTS - timedelta(days=1)
        backend.acquire_many([AcquireRequest(f"job-{n:05d}", first, "b", 60) for n in range(JOBS)])
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                f"""INSERT INTO "{schema}".runs (run_id, job, slot, state, attempt, token,
                                                 updated_at, finished_at)
                SELECT 'job-' || lpad((g %% {JOBS})::text, 5, '0') || '@old' || g,
                       'job-' || lpad((g %% {JOBS})::text, 5, '0'),
                       now() - interval '2 days' - g * interval '1 second', 'succeeded', 1, 1,
                       now(), now()
                FROM generate_series(1, %s) AS g""".encode(),
                (history,),
            )
            conn.execute(f'ANALYZE "{schema}".runs')
        took: dict[bool, list[float]] = {True: [], False: []}
        for k in range(rounds):
            for before in (True, False) if k % 2 == 0 else (False, True):
                slot = first + timedelta(minutes=2 * k + 1 + before)
                requests = [AcquireRequest(f"job-{n:05d}", slot, "b", 60) for n in range(JOBS)]
                t0 = time.perf_counter()
                (old if before else backend).acquire_many(requests)
                took[before].append(time.perf_counter() - t0)
        old.close()
    finally:
        backend.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"acquire_many of {JOBS:,} new runs, {history:,} runs of history: before "
          + ", ".join(f"{t:.3f}" for t in took[True]) + " s; today "
          + ", ".join(f"{t:.3f}" for t in took[False]) + " s")  # fmt: skip
    return statistics.median(took[True]), statistics.median(took[False])


def instance(url: str, owner: str, start_at: float, slot_s: int, before: bool = False) -> None:
    """One competing instance: a single tick deciding every due run of 10,000 jobs."""
    backend = PostgresLeaseBackend.from_url(url)
    if before:
        queries = backend._queries  # the benchmark's own "before": version 8's function
        for key in ("acquire_many", "acquire_many_as"):
            queries[key] = queries[key].replace(".acquire_many(", ".acquire_many_v8(", 1)
    slot = datetime.fromtimestamp(slot_s, UTC)
    requests = [AcquireRequest(f"job-{n:05d}", slot, owner, 60) for n in range(JOBS)]
    backend.now()  # the pool holds a live connection before the race starts
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.perf_counter()
    results = backend.acquire_many(requests)
    if before:
        [result.run.lost for result in results if result.run is not None]
    took = time.perf_counter() - t0
    done = time.time()
    won = [r.run.id for r in results if r.outcome is Outcome.WON and r.run is not None]
    print(json.dumps({"won": won, "took": took, "done": done}))
    backend.close()


def default_url() -> str:
    """The server the benchmark uses without an argument."""
    return os.environ.get("RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def rows(quick: bool = False) -> list[Row]:
    """The table rows: each lease step against the raw insert, and the 3-instance tick."""
    base = default_url()
    schema = f"relay_bench_{secrets.token_hex(4)}"
    url = _url(base, schema)
    backend = PostgresLeaseBackend.from_url(url)
    try:
        medians = steps(base, schema, backend, 300 if quick else STEPS)
        batched = batched_heartbeat(backend, 100 if quick else 300)
        server = server_time(1000 if quick else 4000)
        ticks = tick_rounds(base, schema, 3 if quick else 5)
        history = 200_000 if quick else 500_000
        history_before, history_now = history_tick(base, history, 3)
    finally:
        backend.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    raw = medians.pop("raw")
    sql_alone = {step: medians.pop(step) for step in ("acquire SQL, schema 7", "acquire SQL")}
    out = [
        Row("postgres", step, s * 1e3, "ms", raw * 1e3, "raw INSERT", "<= 1.5x", ratio_at_most(1.5))
        for step, s in medians.items()
    ]
    out += [
        Row("postgres", f"{step.replace('SQL', 'statement alone')} (before/after version 8)",
            s * 1e3, "ms", raw * 1e3, "raw INSERT")
        for step, s in sql_alone.items()
    ]  # fmt: skip
    out.append(
        Row("postgres", "heartbeat, 10 runs per statement (heartbeat_many), per run",
            batched * 1e3, "ms", raw * 1e3, "raw INSERT")
    )  # fmt: skip
    millis, written = server
    server_raw = millis.pop("raw")
    out += [
        Row("postgres", f"server's time per {step} (pg_stat_statements)", ms * 1e3, "µs",
            server_raw * 1e3, "raw INSERT")
        for step, ms in millis.items()
    ]  # fmt: skip
    raw_writes = written.pop("raw INSERT")
    for step, figures in written.items():
        rows_written = figures["inserted"] + figures["updated"]
        judged = step == "acquire"
        out.append(
            Row("postgres", f"rows written per new run, {step} (inserted + updated)",
                rows_written, "rows", raw_writes["inserted"] + raw_writes["updated"],
                "raw INSERT", "<= 1 row" if judged else "",
                (lambda value, _: value <= 1.0) if judged else None)
        )  # fmt: skip
        out.append(
            Row("postgres", f"WAL per new run, {step}", figures["wal"], "B", raw_writes["wal"],
                "raw INSERT")
        )  # fmt: skip
    figure = f"tick, {JOBS:,} due jobs, {INSTANCES} processes, median of {len(ticks.after)}"
    raw_name = f"{JOBS:,} ids, batched INSERT … ON CONFLICT, {INSTANCES} processes (median)"
    raw_wall = statistics.median(ticks.raw)
    out.append(
        Row("postgres", f"{figure} (each once: {ticks.once_after})", statistics.median(ticks.after),
            "s", raw_wall, raw_name, "<= 3x", ratio_at_most(3.0))
    )  # fmt: skip
    out.append(
        Row("postgres", f"{figure}, before version {TICK_BEFORE + 1} (each once: "
            f"{ticks.once_before})", statistics.median(ticks.before), "s", raw_wall, raw_name)
    )  # fmt: skip
    out.append(
        Row("postgres", f"acquire_many of {JOBS:,} new runs, one process, {history:,} runs of "
            "history (median of 3)", history_now, "s", history_before,
            f"version {TICK_BEFORE}'s function")
    )  # fmt: skip
    return out


def main(base: str) -> None:
    schema = f"relay_bench_{secrets.token_hex(4)}"
    url = _url(base, schema)
    backend = PostgresLeaseBackend.from_url(url)
    try:
        medians = steps(base, schema, backend)
        server_time(4000)  # prints its figures
        install_tick_before(base, schema)
        ticks = [tick_race(url, minute) for minute in (1, 0)]
        ticks.append(tick_race(url, 2, before=True))
        raw_race(base, schema)
    finally:
        backend.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    raw = medians.pop("raw")
    print(f"raw INSERT … ON CONFLICT DO NOTHING: {raw * 1e3:.3f} ms per statement (median)")
    for name, seconds in medians.items():
        print(f"{name:>9}: {seconds * 1e3:.3f} ms  = {seconds / raw:.2f}x raw  (target <= 1.5x)")
    pair = medians["acquire"] + medians["finish"]
    print(f"acquire + finish: {pair * 1e3:.3f} ms = {pair / (2 * raw):.2f}x raw per step")
    labels = ("first tick (new jobs)", "next tick", f"a tick before version {TICK_BEFORE + 1}")
    for label, (wall, wins, took) in zip(labels, ticks, strict=True):
        once = sorted(set(wins.values())) == [1] and len(wins) == JOBS
        print(
            f"{label}: {JOBS:,} due jobs, {INSTANCES} competing processes: wall {wall:.3f} s "
            f"(target <= 1 s); each acquire_many took {', '.join(f'{t:.3f}' for t in took)} s; "
            f"runs claimed: {len(wins):,}, every one exactly once: {once}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--raw":
        raw_instance(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--instance":
        instance(
            sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), "before" in sys.argv[6:]
        )
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else default_url())
