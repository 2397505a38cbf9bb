"""What the PostgreSQL lease backend adds to the contract: URLs, schemas, round trips, batches."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from relay import (
    AcquireRequest,
    BackendUnavailable,
    ConfigurationError,
    LeaseLost,
    Outcome,
    open_backend,
)
from relay.backends._postgres_schema import LEGACY_VERSION, read_layout
from relay.backends.postgres import SCHEMA_VERSION, PostgresLeaseBackend
from tests.support.backends import unique
from tests.support.services import SERVICES

pytestmark = pytest.mark.postgres
UTC = timezone.utc
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def schema() -> Iterator[str]:
    name = unique()
    yield name
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def backend(schema: str) -> Iterator[PostgresLeaseBackend]:
    opened = PostgresLeaseBackend.from_url(_url(schema))
    yield opened
    opened.close()


def _url(schema: str, base: str | None = None) -> str:
    base = base or SERVICES["postgres"].url
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def _with(**parts: Any) -> str:
    """The test server's URL with some parts replaced (user, database, port)."""
    from urllib.parse import urlsplit, urlunsplit

    url = urlsplit(SERVICES["postgres"].url)
    user = parts.get("user", url.username)
    host = f"{url.hostname}:{parts.get('port', url.port)}"
    path = "/" + parts.get("database", url.path.lstrip("/"))
    return urlunsplit(url._replace(netloc=f"{user}@{host}", path=path))


# Fixed once, so that every call in a test names the same runs, whatever minute it is.
_BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def _slot(minutes: int) -> datetime:
    return _BASE + timedelta(minutes=minutes)


# -- URLs and what goes wrong opening them ----------------------------------------------------


def test_both_schemes_open_the_backend(schema: str) -> None:
    for scheme in ("postgresql", "postgres"):
        url = _url(schema).replace("postgresql://", f"{scheme}://", 1)
        backend = open_backend(url)
        assert isinstance(backend, PostgresLeaseBackend) and backend.schema == schema
        backend.close()


def test_libpq_options_pass_through_and_relay_options_do_not(schema: str) -> None:
    backend = PostgresLeaseBackend.from_url(_url(schema) + "&application_name=relay_probe")
    with backend._pool.connection() as conn:
        row = conn.execute("SELECT current_setting('application_name')").fetchone()
    backend.close()
    assert row == ("relay_probe",)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://postgres@127.0.0.1:notaport/test", ["port"]),
        ("postgresql://postgres@[::1/test", ["malformed"]),
        ("postgresql://postgres@127.0.0.1/test?shema=relay", ["shema", "schema"]),
        ("postgresql://postgres@127.0.0.1/test?schema=My-App", ["lowercase", "?schema=relay"]),
        ("postgresql://postgres@127.0.0.1/test?pool_max=none", ["pool_max", "positive"]),
    ],
)
def test_a_malformed_url_is_a_configuration_error_naming_the_fix(
    url: str, words: list[str]
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PostgresLeaseBackend.from_url(url)
    for word in words:
        assert word in str(caught.value)


def test_an_unknown_user_is_refused_with_the_fix() -> None:
    with pytest.raises(BackendUnavailable) as caught:
        PostgresLeaseBackend.from_url(_with(user="relay_no_such_user"))
    assert 'role "relay_no_such_user" does not exist' in str(caught.value)
    assert "CREATE ROLE" in str(caught.value)


def test_a_missing_database_is_refused_with_the_fix() -> None:
    with pytest.raises(BackendUnavailable) as caught:
        PostgresLeaseBackend.from_url(_with(database="relay_no_such_db"))
    assert 'database "relay_no_such_db" does not exist' in str(caught.value)
    assert "createdb" in str(caught.value)


def test_a_server_that_does_not_answer_is_unavailable() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(BackendUnavailable) as caught:
            PostgresLeaseBackend.from_url(_with(port=port))
    assert "check that the server is running" in str(caught.value)


# -- the schema ---------------------------------------------------------------------------------


def test_schema_is_versioned_and_reopening_changes_nothing(schema: str) -> None:
    for _ in range(2):
        PostgresLeaseBackend.from_url(_url(schema)).close()
    with psycopg.connect(SERVICES["postgres"].url) as conn:
        rows = conn.execute(f'SELECT key, value FROM "{schema}".meta ORDER BY key').fetchall()
        layout = read_layout(conn, schema)
    # meta keeps Relay 0.1's version while 0.1 may use the schema; the layout row, this one's.
    assert rows == [("schedule_revision", "0"), ("schema_version", str(LEGACY_VERSION))]
    assert layout.layout == SCHEMA_VERSION


def test_a_version_1_schema_is_migrated_and_keeps_its_runs(backend: PostgresLeaseBackend) -> None:
    first = backend.acquire(AcquireRequest("job", _slot(0), "a", 30)).run
    assert first is not None
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{backend.schema}\".meta SET value = '1'")
    again = PostgresLeaseBackend.from_url(_url(backend.schema))
    try:
        again.heartbeat(first.id, first.token, 30)
        later = again.acquire(AcquireRequest("job", _slot(1), "a", 30)).run
        assert later is not None and later.token > first.token
        assert again.add_schedule("stored", "{}", "{}", "me").version == 1  # version 6
    finally:
        again.close()
    with psycopg.connect(SERVICES["postgres"].url) as conn:
        rows = conn.execute(
            f"SELECT value FROM \"{backend.schema}\".meta WHERE key = 'schema_version'"
        ).fetchall()
        layout = read_layout(conn, backend.schema)
    assert rows == [(str(LEGACY_VERSION),)] and layout.layout == SCHEMA_VERSION


def test_a_schema_from_a_newer_relay_is_refused(backend: PostgresLeaseBackend) -> None:
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{backend.schema}\".meta SET value = '99'")
    with pytest.raises(ConfigurationError, match="newer Relay"):
        PostgresLeaseBackend.from_url(_url(backend.schema))


def test_schemas_keep_apps_apart(backend: PostgresLeaseBackend) -> None:
    other_schema = unique()
    other = PostgresLeaseBackend.from_url(_url(other_schema))
    try:
        request = AcquireRequest("job", _slot(0), "a", 30)
        assert backend.acquire(request).outcome is Outcome.WON
        assert other.acquire(request).outcome is Outcome.WON
        assert len(other.runs()) == 1
    finally:
        other.close()
        with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{other_schema}" CASCADE')


@pytest.mark.slow
def test_processes_creating_one_schema_at_once_all_succeed(schema: str) -> None:
    code = (
        "import sys; from relay.backends.postgres import PostgresLeaseBackend as B; "
        "B.from_url(sys.argv[1]).close()"
    )
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'shared'}", "PATH": "/usr/bin:/bin"}
    openers = [
        subprocess.Popen([sys.executable, "-c", code, _url(schema)], env=env, text=True,
                         stderr=subprocess.PIPE)
        for _ in range(4)
    ]  # fmt: skip
    for opener in openers:
        _, stderr = opener.communicate(timeout=60)
        assert opener.returncode == 0, stderr


def test_a_dropped_schema_is_reported_not_raised_raw(backend: PostgresLeaseBackend) -> None:
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{backend.schema}" CASCADE')
    with pytest.raises(BackendUnavailable, match="reopen"):
        backend.runs()


# -- round trips and batches -------------------------------------------------------------------


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement any psycopg connection sends from now on: one round trip each."""
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def counting(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    return sent


def test_acquire_and_finish_take_two_round_trips(
    backend: PostgresLeaseBackend, statements: list[str]
) -> None:
    result = backend.acquire(AcquireRequest("job", _slot(0), "a", 30))
    assert result.run is not None
    backend.finish(result.run.id, result.run.token, succeeded=True)
    assert len(statements) == 2


def test_a_batch_is_decided_in_one_round_trip(
    backend: PostgresLeaseBackend, statements: list[str]
) -> None:
    requests = [AcquireRequest(f"job-{j}", _slot(s), "a", 30) for j in range(50) for s in range(4)]
    results = backend.acquire_many(requests)
    assert len(statements) == 1
    assert {r.outcome for r in results} == {Outcome.WON}


def _expiry(backend: PostgresLeaseBackend, run_id: str) -> datetime:
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT expires_at FROM "{backend.schema}".runs WHERE run_id = %s', (run_id,)
        ).fetchone()
    assert row is not None
    return row[0]


def test_heartbeat_many_renews_held_runs_in_one_round_trip(
    backend: PostgresLeaseBackend, statements: list[str]
) -> None:
    held = [backend.acquire(AcquireRequest(f"job-{n}", _slot(0), "a", 30)).run for n in range(3)]
    assert all(run is not None for run in held)
    before = [_expiry(backend, run.id) for run in held if run]
    statements.clear()
    items = [(run.id, run.token) for run in held if run]
    assert backend.heartbeat_many(items, 600.0) == [None, None, None]
    assert len(statements) == 1
    after = [_expiry(backend, run.id) for run in held if run]
    gained = [later - early for early, later in zip(before, after, strict=True)]
    assert all(step > timedelta(seconds=500) for step in gained)
    assert backend.heartbeat_many([], 600.0) == []


def test_heartbeat_many_reports_each_lost_run_as_heartbeat_would(
    backend: PostgresLeaseBackend,
) -> None:
    runs = [backend.acquire(AcquireRequest(f"job-{n}", _slot(0), "a", 30)).run for n in range(3)]
    kept, stale, done = runs
    assert kept is not None and stale is not None and done is not None
    backend.finish(done.id, done.token, succeeded=True)
    items = [(stale.id, stale.token - 1), (kept.id, kept.token), (done.id, done.token),
             ("job-9@nowhere", 1)]  # fmt: skip
    unchanged = _expiry(backend, stale.id)
    results = backend.heartbeat_many(items, 600.0)
    assert results[1] is None and _expiry(backend, stale.id) == unchanged
    for (run_id, token), result in zip(items, results, strict=True):
        if result is None:
            continue
        with pytest.raises(LeaseLost) as single:
            backend.heartbeat(run_id, token, 600.0)
        assert isinstance(result, LeaseLost) and str(result) == str(single.value)
    assert [r is None for r in results] == [False, True, False, False]


def test_a_batch_sees_its_own_earlier_requests(backend: PostgresLeaseBackend) -> None:
    results = backend.acquire_many(
        [
            AcquireRequest("solo", _slot(0), "a", 30, overlap_skip=True),
            AcquireRequest("solo", _slot(1), "a", 30, overlap_skip=True),
            AcquireRequest("solo", _slot(0), "b", 30),
            AcquireRequest("many", _slot(0), "a", 30),
            AcquireRequest("many", _slot(1), "a", 30),
            AcquireRequest("many", _slot(2), "a", 30),
        ]
    )
    assert [r.outcome for r in results] == [
        Outcome.WON, Outcome.OVERLAP, Outcome.HELD, Outcome.WON, Outcome.WON, Outcome.WON,
    ]  # fmt: skip
    tokens = [r.run.token for r in results[3:] if r.run is not None]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


def test_a_batch_that_waited_for_a_jobs_row_still_takes_a_jobs_requests_in_turn(
    backend: PostgresLeaseBackend,
) -> None:
    # Version 12 numbers the rounds without a sort only when it did not wait: after a wait the
    # runs are read again, and the jobs left undecided are counted afresh.
    backend.acquire_many([AcquireRequest(job, _slot(9), "a", 30) for job in ("first", "many")])
    requests = [
        AcquireRequest("first", _slot(0), "a", 30),
        AcquireRequest("many", _slot(0), "a", 30),
        AcquireRequest("many", _slot(1), "a", 30),
    ]
    with psycopg.connect(SERVICES["postgres"].url) as conn:
        conn.execute(f"SELECT 1 FROM \"{backend.schema}\".jobs WHERE name = 'first' FOR UPDATE")
        waiting = ThreadPoolExecutor(1)
        decided = waiting.submit(backend.acquire_many, requests)
        time.sleep(0.5)  # the batch waits for the row this transaction holds
        assert not decided.done()
        conn.execute(  # and this one leases the first run meanwhile, as an acquire would
            f"""INSERT INTO "{backend.schema}".runs (run_id, job, slot, state, attempt, token,
                                                    owner, expires_at, updated_at)
            VALUES (%s, 'first', %s, 'running', 1, 1, 'x', now() + interval '10 minutes', now())""",
            (requests[0].id, requests[0].slot),
        )
        conn.commit()
    results = decided.result(timeout=10)
    waiting.shutdown()
    assert [r.outcome for r in results] == [Outcome.HELD, Outcome.WON, Outcome.WON]
    tokens = [r.run.token for r in results[1:] if r.run is not None]
    assert len(tokens) == 2 and tokens[0] < tokens[1]


def test_a_run_backfilled_after_a_batch_read_it_is_decided_as_recorded(
    backend: PostgresLeaseBackend,
) -> None:
    # Version 15 inserts the runs it read as new without ON CONFLICT. A backfill (or a trigger)
    # records a run without its job's row, so it may land between that read and the insert: the
    # insert fails, is undone, and the batch decides every run from what is recorded.
    backend.acquire_many([AcquireRequest(job, _slot(9), "a", 30) for job in ("first", "late")])
    requests = [AcquireRequest(job, _slot(0), "a", 30) for job in ("first", "late")]
    with psycopg.connect(SERVICES["postgres"].url) as conn:
        # Not the first job's row: the batch takes that one without waiting, so it does not read
        # the runs again before its insert.
        conn.execute(f"SELECT 1 FROM \"{backend.schema}\".jobs WHERE name = 'late' FOR UPDATE")
        waiting = ThreadPoolExecutor(1)
        decided = waiting.submit(backend.acquire_many, requests)
        time.sleep(0.5)  # the batch has read both runs as new and waits for the row held here
        assert not decided.done()
        conn.execute(
            f"""INSERT INTO "{backend.schema}".runs (run_id, job, slot, state, reason, updated_at)
            VALUES (%s, 'late', %s, 'pending', 'backfill', now())""",
            (requests[1].id, requests[1].slot),
        )
        conn.commit()
    results = decided.result(timeout=10)
    waiting.shutdown()
    assert [r.outcome for r in results] == [Outcome.WON, Outcome.WON]
    won = results[1].run
    assert won is not None and won.attempt == 1
    late = [r for r in backend.runs("late") if r.id == requests[1].id]
    assert [(r.state.value, r.attempt, r.owner, r.reason, r.token) for r in late] == [
        ("running", 1, "a", None, won.token)
    ]


def test_tokens_follow_the_servers_clock_and_outgrow_a_counter_set_back(
    backend: PostgresLeaseBackend,
) -> None:
    single = backend.acquire(AcquireRequest("one", _slot(0), "a", 30)).run
    batch = backend.acquire_many(
        [AcquireRequest("many", _slot(0), "a", 30), AcquireRequest("many", _slot(1), "a", 30)]
    )
    now_us = backend.now().timestamp() * 1_000_000
    tokens = [single.token if single else 0, *(r.run.token for r in batch if r.run)]
    assert len(tokens) == 3 and all(0 <= now_us - token < 60_000_000 for token in tokens)
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{backend.schema}".jobs SET token = 5')  # the counters' tail lost
    again = backend.acquire(AcquireRequest("one", _slot(1), "a", 30)).run
    more = backend.acquire_many(
        [AcquireRequest("many", _slot(2), "a", 30), AcquireRequest("many", _slot(3), "a", 30)]
    )
    later = [again.token if again else 0, *(r.run.token for r in more if r.run)]
    assert len(later) == 3 and min(later) > max(tokens)


def _writes(backend: PostgresLeaseBackend, query: str, params: tuple[Any, ...]) -> dict[str, Any]:
    """Rows ``query`` inserts and updates per table, in one transaction of its own."""
    with psycopg.connect(SERVICES["postgres"].url) as conn:  # not autocommit: one transaction
        conn.execute(backend._queries[query], params).fetchall()
        counts = conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables"
            " WHERE schemaname = %s AND (n_tup_ins > 0 OR n_tup_upd > 0)",
            (backend.schema,),
        ).fetchall()
    return {name: (ins, upd) for name, ins, upd in counts}


def test_a_new_run_writes_its_own_row_and_no_other(backend: PostgresLeaseBackend) -> None:
    backend.acquire_many([AcquireRequest(job, _slot(0), "a", 30) for job in ("one", "x", "y")])
    one = AcquireRequest("one", _slot(1), "a", 30)
    params = (one.id, "one", one.slot, "a", 30.0, 1, False, None, False, None)
    assert _writes(backend, "acquire_one", params) == {"runs": (1, 0)}
    many = [AcquireRequest(job, _slot(1), "a", 30) for job in ("x", "y")]
    batch = (
        [r.id for r in many], [r.job for r in many], [r.slot for r in many], ["a", "a"],
        [30.0, 30.0], [1, 1], [False, False], [None, None], [False, False], [None, None],
    )  # fmt: skip
    assert _writes(backend, "acquire_many", batch) == {"runs": (2, 0)}


def test_tokens_outgrow_the_jobs_highest_token_even_ahead_of_the_clock(
    backend: PostgresLeaseBackend,
) -> None:
    first = backend.acquire(AcquireRequest("one", _slot(0), "a", 30)).run
    batch = backend.acquire_many(
        [AcquireRequest("many", _slot(0), "a", 30), AcquireRequest("x", _slot(0), "a", 30)]
    )
    assert first is not None and all(r.run is not None for r in batch)
    ahead = int(backend.now().timestamp() * 1_000_000) + 3_600_000_000  # a clock gone back 1 h
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{backend.schema}".runs SET token = %s', (ahead,))
        conn.execute(f'UPDATE "{backend.schema}".jobs SET token = 5')
    again = backend.acquire(AcquireRequest("one", _slot(1), "a", 30)).run
    more = backend.acquire_many(
        [AcquireRequest("many", _slot(1), "a", 30), AcquireRequest("many", _slot(2), "a", 30)]
    )
    tokens = [again.token if again else 0, *(r.run.token for r in more if r.run)]
    assert len(tokens) == 3 and min(tokens) > ahead and tokens[1] < tokens[2]


def test_a_batch_keeps_a_jobs_token_floor_from_before_version_8(
    backend: PostgresLeaseBackend,
) -> None:
    # Version 12 reads the jobs' rows for their floors only when one of the batch keeps one.
    backend.acquire_many([AcquireRequest(job, _slot(0), "a", 30) for job in ("kept", "plain")])
    ahead = int(backend.now().timestamp() * 1_000_000) + 3_600_000_000
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE \"{backend.schema}\".jobs SET token = %s WHERE name = 'kept'", (ahead,)
        )
    batch = backend.acquire_many(
        [AcquireRequest("kept", _slot(1), "a", 30), AcquireRequest("plain", _slot(1), "a", 30)]
    )
    kept, plain = (r.run.token if r.run else 0 for r in batch)
    assert kept == ahead + 1 and 0 < plain < ahead


def test_prune_keeps_the_run_holding_a_jobs_highest_token(backend: PostgresLeaseBackend) -> None:
    later = backend.acquire(AcquireRequest("job", _slot(2), "a", 30)).run
    assert later is not None
    backend.finish(later.id, later.token, succeeded=True)
    older = backend.acquire(AcquireRequest("job", _slot(1), "a", 30)).run  # acquired last
    assert older is not None and older.token > later.token
    backend.finish(older.id, older.token, succeeded=True)
    assert backend.skip("job", _slot(0), "paused")
    assert backend.prune(0.0) == 1  # the skipped run (token 0) alone
    assert {run.id for run in backend.runs("job")} == {later.id, older.id}


def test_no_session_state_outlives_a_step(schema: str) -> None:
    backend = PostgresLeaseBackend.from_url(_url(schema) + "&pool_max=1")  # one connection
    for minute in range(10):
        result = backend.acquire(AcquireRequest("job", _slot(minute), "a", 30))
        assert result.run is not None
        backend.heartbeat(result.run.id, result.run.token, 30)  # asynchronous commit, this once
        backend.runs("job")
    with backend._pool.connection() as conn:
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        commit = conn.execute("SHOW synchronous_commit").fetchone()
        locks = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone()
    backend.close()
    assert (prepared, commit, locks) == ((0,), ("on",), (0,))


def test_a_heartbeat_commits_without_waiting_for_the_disk_and_only_its_own_transaction(
    backend: PostgresLeaseBackend,
) -> None:
    run = backend.acquire(AcquireRequest("job", _slot(0), "a", 30)).run
    assert run is not None
    one, many = backend._queries["heartbeat"], backend._queries["heartbeat_many"]
    params = {"run_id": run.id, "token": run.token, "lease": 30}
    with backend._pool.connection() as conn:
        found = []
        for query, args in [(one, params), (many, ([run.id], [run.token], [30.0]))]:
            with conn.transaction(force_rollback=True):
                found.append(conn.execute(query, args).fetchall())
                found.append(conn.execute("SHOW synchronous_commit").fetchall())
            found.append(conn.execute("SHOW synchronous_commit").fetchall())
        found.append(conn.execute(one, {**params, "token": run.token + 1}).fetchall())
    assert found == [
        [(True,)], [("off",)], [("on",)],
        [(run.id, run.token)], [("off",)], [("on",)],
        [(False,)],
    ]  # fmt: skip


def test_heartbeat_many_of_one_run_renews_and_reports_a_lost_run_as_heartbeat_does(
    backend: PostgresLeaseBackend,
) -> None:
    run = backend.acquire(AcquireRequest("job", _slot(0), "a", 0.2)).run
    assert run is not None
    assert backend.heartbeat_many([(run.id, run.token)], 30.0) == [None]
    [record] = [r for r in backend.runs("job") if r.id == run.id]
    renewed_until = backend.now() + timedelta(seconds=20)  # the lease was 0.2 s
    assert record.expires_at is not None and record.expires_at > renewed_until
    [lost] = backend.heartbeat_many([(run.id, run.token + 1)], 30.0)
    with pytest.raises(LeaseLost) as raised:
        backend.heartbeat(run.id, run.token + 1, 30.0)
    assert isinstance(lost, LeaseLost) and str(lost) == str(raised.value)


def test_close_is_idempotent_and_a_closed_backend_is_unavailable(
    backend: PostgresLeaseBackend,
) -> None:
    backend.close()
    backend.close()
    with pytest.raises(BackendUnavailable):
        backend.now()


# -- the two SQL mirrors of the lease rules agree -----------------------------------------------
# The truth table moved to tests/contract/test_lease_rules_contract.py: every lease backend, both
# acquire and acquire_many (here: acquire_one and acquire_many), every rule.


def test_the_password_never_shows(schema: str) -> None:
    url = _url(schema).replace("://postgres@", "://postgres:sekrit@", 1)
    backend = PostgresLeaseBackend.from_url(url)
    backend.close()
    assert "sekrit" not in backend.name and "***" in backend.name
    missing = _with(database="relay_no_such_db").replace("://postgres@", "://postgres:sekrit@", 1)
    with pytest.raises(BackendUnavailable) as caught:
        PostgresLeaseBackend.from_url(missing)
    assert "sekrit" not in str(caught.value)


@pytest.mark.slow
def test_processes_racing_batches_in_different_orders_win_each_run_once(
    schema: str, tmp_path: Path
) -> None:
    from tests.backends import pg_procs
    from tests.support import procs

    url = _url(schema)
    PostgresLeaseBackend.from_url(url).close()
    jobs = [f"allow-{n:03d}" for n in range(60)] + [f"skip-{n:03d}" for n in range(20)]
    slots = [int(_slot(minute).timestamp() * 1000) for minute in range(3)]
    start_at = time.time() + 3
    options = {"url": url, "jobs": jobs, "slots": slots, "batch": 37, "start_at": start_at}
    racers = [
        pg_procs.spawn("race-batch", {**options, "owner": f"p{n}", "seed": n}, tmp_path / f"{n}")
        for n in range(3)
    ]
    wins: Counter[tuple[str, int]] = Counter()
    for racer in racers:
        assert procs.next_event(racer)["event"] == "ready"
    for racer in racers:
        event = procs.next_event(racer, timeout=120)
        wins.update((job, ms) for job, ms in event["won"])
        procs.finish(racer)
    assert set(wins.values()) == {1}
    allowed = {(job, ms) for job in jobs if job.startswith("allow") for ms in slots}
    assert allowed <= set(wins)
    for job in jobs[60:]:  # overlap skip: one run of each job wins, the others are skipped
        assert sum(1 for won_job, _ in wins if won_job == job) == 1
