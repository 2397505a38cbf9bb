"""What only the SQLite lease backend has: its URL, its schema versions, its token counter rows."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from relay.backends._sqlite_connection import SharedConnection
from relay.backends._sqlite_layout import LEGACY_VERSION
from relay.backends.sqlite import SCHEMA_VERSION, SQLiteLeaseBackend
from relay.contract import AcquireRequest, Outcome
from relay.errors import BackendUnavailable, ConfigurationError, LeaseLost
from relay.runs import RunState
from tests.support.backends import sqlite_live_counts

SLOT = datetime(2026, 1, 1, tzinfo=timezone.utc)

# The schema of Relay's first SQLite release, as it created it (version 1).
VERSION_1 = """
CREATE TABLE relay_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE relay_jobs (name TEXT PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE relay_runs (
    run_id TEXT PRIMARY KEY, job TEXT NOT NULL, slot_ms INTEGER NOT NULL, state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 1, token INTEGER NOT NULL DEFAULT 0, owner TEXT,
    reason TEXT, error TEXT, expires_ms INTEGER, started_ms INTEGER, finished_ms INTEGER,
    updated_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX relay_runs_live ON relay_runs (job, expires_ms)
    WHERE state IN ('running', 'pending');
INSERT INTO relay_meta VALUES ('schema_version', '1');
INSERT INTO relay_jobs VALUES ('report', 41);
INSERT INTO relay_runs (run_id, job, slot_ms, state, attempt, max_attempts, token, owner,
    expires_ms, updated_ms)
    VALUES ('report@2026-01-01T00:00:00Z', 'report', 1767225600000, 'running', 1, 3, 41, 'old',
    1767225630000, 1767225600000);
"""


def request(job: str, slot: datetime, owner: str = "me") -> AcquireRequest:
    return AcquireRequest(job, slot, owner, lease=30, max_attempts=3)


def test_a_version_1_database_is_migrated_and_keeps_its_tokens_growing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(VERSION_1)
    # A clock at the epoch puts the tokens' clock floor below the counter: the counter decides.
    backend = SQLiteLeaseBackend(path, clock=lambda: 0.0)
    # The run leased under version 1 is still held by its token ...
    backend.heartbeat("report@2026-01-01T00:00:00Z", 41, 30)
    # ... and the next lease of the job gets a greater token than any handed out before.
    won = backend.acquire(request("report", SLOT + timedelta(minutes=1))).run
    assert won is not None and won.token == 42
    backend.close()
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        version = conn.execute("SELECT value FROM relay_meta").fetchone()[0]
        layout = conn.execute("SELECT layout FROM relay_layout").fetchone()[0]
    assert "relay_jobs" not in tables
    assert version == str(LEGACY_VERSION) and layout == SCHEMA_VERSION  # see relay.layout
    assert sqlite_live_counts(path) == {"report": 2}  # the old run and the new one


def test_a_database_from_a_newer_relay_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteLeaseBackend(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE relay_meta SET value = '99'")
    with pytest.raises(ConfigurationError, match=r"version 99.*upgrade Relay"):
        SQLiteLeaseBackend(path)


def test_reopening_leaves_the_schema_and_the_runs_alone(tmp_path: Path) -> None:
    path = tmp_path / "relay.db"
    first = SQLiteLeaseBackend(path)
    won = first.acquire(request("job", SLOT)).run
    assert won is not None
    first.close()
    again = SQLiteLeaseBackend(path)
    assert again.finish(won.id, won.token, succeeded=True) is RunState.SUCCEEDED
    again.close()


def test_token_counters_are_not_listed_as_runs(tmp_path: Path) -> None:
    backend = SQLiteLeaseBackend(tmp_path / "relay.db")
    for job in ("a", "b"):
        run = backend.acquire(request(job, SLOT)).run
        assert run is not None
        backend.finish(run.id, run.token, succeeded=True)
    assert sorted(r.id for r in backend.runs()) == [
        "a@2026-01-01T00:00:00Z",
        "b@2026-01-01T00:00:00Z",
    ]
    assert [r.id for r in backend.runs("a")] == ["a@2026-01-01T00:00:00Z"]
    assert backend.reclaimable() == []
    assert backend.last_slot("a") == SLOT
    backend.close()


def test_tokens_grow_per_job_through_new_runs_retries_and_takeovers(tmp_path: Path) -> None:
    now = [SLOT.timestamp()]
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: now[0])
    tokens = []
    first = backend.acquire(request("job", SLOT)).run
    assert first is not None
    tokens.append(first.token)
    second = backend.acquire(request("job", SLOT + timedelta(seconds=1))).run
    assert second is not None
    tokens.append(second.token)
    now[0] += 31  # the first run's lease expires: it is taken over
    taken = backend.acquire(request("job", SLOT, owner="other")).run
    assert taken is not None and taken.attempt == 2
    tokens.append(taken.token)
    backend.finish(taken.id, taken.token, succeeded=False)  # failed: pending, to be retried
    retried = backend.acquire(request("job", SLOT)).run
    assert retried is not None and retried.attempt == 3
    tokens.append(retried.token)
    assert tokens == sorted(set(tokens))
    with pytest.raises(LeaseLost, match="stale"):
        backend.finish(first.id, first.token, succeeded=True)
    backend.close()


def test_a_recorded_run_spends_no_token(tmp_path: Path) -> None:
    # A clock that stands still: the tokens' clock floor does not move between the leases.
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: SLOT.timestamp())
    won = backend.acquire(request("job", SLOT)).run
    assert won is not None
    assert backend.acquire(request("job", SLOT, owner="other")).outcome is Outcome.HELD
    after = backend.acquire(request("job", SLOT + timedelta(seconds=1))).run
    assert after is not None and after.token == won.token + 1
    backend.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://host/relay.db", "has a host"),
        ("sqlite:///", "names no file"),
        ("sqlite:///relay.db?busy=3", "busy"),
    ],
)
def test_bad_urls_name_the_fix(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SQLiteLeaseBackend.from_url(url)


def test_a_live_run_behind_many_finished_ones_is_still_found(tmp_path: Path) -> None:
    now = [SLOT.timestamp()]
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: now[0])
    old = backend.acquire(request("job", SLOT)).run  # its runner will die
    assert old is not None
    for second in range(1, 200):
        run = backend.acquire(request("job", SLOT + timedelta(seconds=second))).run
        assert run is not None
        backend.finish(run.id, run.token, succeeded=True)
    # Still live: a run that skips overlap is refused ...
    overlapping = AcquireRequest("job", SLOT + timedelta(seconds=500), "me", 30, overlap_skip=True)
    assert backend.acquire(overlapping).outcome is Outcome.OVERLAP
    assert backend.reclaimable() == []
    now[0] += 31  # ... until its lease expires: then the sweep finds it.
    assert [r.id for r in backend.reclaimable()] == [old.id]
    taken = backend.acquire(request("job", SLOT, owner="other")).run
    assert taken is not None and taken.attempt == 2
    backend.finish(taken.id, taken.token, succeeded=True)
    assert backend.reclaimable() == []
    assert sqlite_live_counts(backend.path) == {}
    backend.close()


def test_tokens_start_at_the_clock_and_grow_by_one_when_it_goes_back(tmp_path: Path) -> None:
    now = [SLOT.timestamp()]
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: now[0])
    first = backend.acquire(request("job", SLOT)).run
    assert first is not None and first.token == int(SLOT.timestamp() * 1_000_000)
    now[0] -= 3600  # the host's clock is set back an hour: the counter still grows by one
    second = backend.acquire(request("job", SLOT + timedelta(seconds=1))).run
    assert second is not None and second.token == first.token + 1
    now[0] += 7200  # an hour ahead of the first lease: the clock floors the token again
    third = backend.acquire(request("job", SLOT + timedelta(seconds=2))).run
    assert third is not None and third.token == int(now[0] * 1000) * 1000
    backend.close()


@pytest.mark.parametrize("value", ["safe", "FULL", ""])
def test_an_unknown_durability_names_the_choices(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigurationError, match=r"durability=.*'full'.*'fast'"):
        SQLiteLeaseBackend.from_url(f"sqlite:///{tmp_path / 'relay.db'}?durability={value}")
    with pytest.raises(ConfigurationError, match=r"durability=.*'full'.*'fast'"):
        SQLiteLeaseBackend(tmp_path / "relay.db", durability=value)  # type: ignore[arg-type]


# Each step between two markers (writes of its name to /dev/null, which strace shows).
STEPS = """
import os, sys
from datetime import datetime, timezone
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.contract import AcquireRequest

backend = SQLiteLeaseBackend.from_url(sys.argv[1])
marker = os.open(os.devnull, os.O_WRONLY)
slot = datetime(2026, 1, 1, tzinfo=timezone.utc).replace(minute=int(sys.argv[2]))
mark = lambda step: os.write(marker, step.encode())
# The first write after opening starts a new WAL, whose header is synced in every mode.
mark("warm"); backend.skip("warm-up", slot, "first write")
mark("acquire"); run = backend.acquire(AcquireRequest("job", slot, "me", lease=30)).run
mark("start"); backend.start(run.id, run.token, "me", 30)
mark("heartbeat"); backend.heartbeat(run.id, run.token, 30)
mark("finish"); backend.finish(run.id, run.token, succeeded=True)
mark("setup"); other = backend.acquire(AcquireRequest("job", slot.replace(second=1), "me", 30)).run
mark("release"); backend.release(other.id, other.token)
mark("skip"); backend.skip("job", slot.replace(second=2), "missed")
mark("end"); backend.close()
"""
MARKER = re.compile(r'write\(\d+, "(\w+)", \d+\)')


def disk_syncs_per_step(url: str, minute: int, tmp_path: Path) -> dict[str, int]:
    """How many times each step of STEPS, run in its own process, asked the disk to sync."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    log = tmp_path / f"strace-{minute}.log"
    done = subprocess.run(
        [strace, "-f", "-o", str(log), "-e", "trace=write,fsync,fdatasync",
         sys.executable, "-c", STEPS, url, str(minute)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    syncs: dict[str, int] = {}
    step = "open"
    for line in log.read_text().splitlines():
        if found := MARKER.search(line):
            step = found.group(1)
            syncs[step] = 0
        elif "fsync(" in line or "fdatasync(" in line:
            syncs[step] = syncs.get(step, 0) + 1
    return syncs


def test_every_step_but_a_heartbeat_reaches_the_disk_before_it_returns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    syncs = disk_syncs_per_step(url, 0, tmp_path)
    assert syncs["heartbeat"] == 0, syncs
    for step in ("acquire", "start", "finish", "release", "skip"):
        assert syncs[step] >= 1, syncs


def test_durability_fast_never_waits_for_the_disk(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}?durability=fast"
    SQLiteLeaseBackend.from_url(url).close()  # the schema is created (and synced) beforehand
    syncs = disk_syncs_per_step(url, 1, tmp_path)
    for step in ("acquire", "start", "heartbeat", "finish", "release", "skip"):
        assert syncs[step] == 0, syncs


def test_a_version_4_file_is_migrated_to_the_control_plane_and_keeps_its_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "relay.db"
    backend = SQLiteLeaseBackend(path)
    assert backend.backfill("job", [datetime(2026, 1, 1, tzinfo=timezone.utc)]) == [True]
    backend.close()
    with sqlite3.connect(path) as conn:  # as Relay's schema 4 left it
        for column in ("spec", "paused_ms", "paused_by", "paused_reason"):
            conn.execute(f"ALTER TABLE relay_runs DROP COLUMN {column}")
        conn.execute("UPDATE relay_meta SET value = '4' WHERE key = 'schema_version'")
    reader = SQLiteLeaseBackend(path, read_only=True)
    assert [(j.name, j.spec, j.paused) for j in reader.jobs()] == [("job", None, False)]
    reader.close()
    again = SQLiteLeaseBackend(path)
    try:
        assert again.pause("job", "why", "me") is True
        assert [j.paused_reason for j in again.jobs()] == ["why"]
        assert [r.reason for r in again.runs("job")] == ["backfill"]
        assert again.add_schedule("stored", "{}", "{}", "me").version == 1  # version 6
    finally:
        again.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM relay_meta").fetchone() == (str(LEGACY_VERSION),)
        assert conn.execute("SELECT layout FROM relay_layout").fetchone() == (SCHEMA_VERSION,)


def test_a_new_file_held_by_another_opener_is_waited_for_not_refused(tmp_path: Path) -> None:
    """Switching a new file to WAL while another process holds it fails at once in SQLite, without
    its busy handler: instances started together on a new file must wait, not fail to start."""
    path = tmp_path / "relay.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        SQLiteLeaseBackend(path, busy_timeout=10).close()
    finally:
        release.join()
        holder.close()


def _acquire_in_child(path: Path, slot: datetime) -> int:
    """Fork; the child opens ``path`` and leases a run (exit 0), or reports why not (exit 1,
    or killed by its alarm if it hangs). The child's exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            signal.alarm(20)
            child = SQLiteLeaseBackend(path, busy_timeout=10)
            won = child.acquire(request("child", slot)).outcome is Outcome.WON
            child.close()
            code = 0 if won else 1
        except BaseException as exc:  # the parent's assertion shows the exit status
            sys.stderr.write(f"child: {exc!r}\n")
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_while_another_thread_is_inside_a_step_can_use_the_store(
    tmp_path: Path,
) -> None:
    # Celery forks its pool's children and an embedded beat (worker --beat) from a worker whose
    # heartbeat thread writes to the store: a child forked in the middle of such a write inherited
    # SQLite's lock state and failed to open the file ("database is locked", "locking
    # protocol") or hung. The fork now waits for the step and the connection to close.
    path = tmp_path / "relay.db"
    inside, leave = threading.Event(), threading.Event()

    def clock() -> float:  # read inside each write transaction, with SQLite's write lock held
        if threading.current_thread().name == "writer":
            inside.set()
            leave.wait(10)
        return time.time()

    backend = SQLiteLeaseBackend(path, clock=clock)
    writer = threading.Thread(
        target=lambda: backend.acquire(request("parent", SLOT)), name="writer"
    )
    writer.start()
    assert inside.wait(10)
    threading.Timer(0.3, leave.set).start()  # the step ends a moment after the fork began
    statuses = [_acquire_in_child(path, SLOT + timedelta(minutes=n)) for n in range(3)]
    writer.join(10)
    assert statuses == [0, 0, 0]
    # The parent goes on with a connection of its own, reopened after the forks.
    assert backend.acquire(request("parent", SLOT + timedelta(minutes=1))).outcome is Outcome.WON
    assert backend.runs("child", limit=10)[0].state is RunState.RUNNING
    backend.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_while_another_thread_opens_the_store_can_use_it(tmp_path: Path) -> None:
    # A deferred backend opens at its first use, in whichever thread comes first: a Celery
    # worker's heartbeat thread opened its SQLite file while the worker forked its embedded beat,
    # whose store then hung. The fork now waits for a connection being opened too.
    path = tmp_path / "relay.db"
    SQLiteLeaseBackend(path).close()  # the schema, so that the children only lease
    inside, leave, opened = threading.Event(), threading.Event(), []

    def connect() -> sqlite3.Connection:  # an open that writes (as switching to WAL may)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
        inside.set()
        leave.wait(10)
        conn.execute("COMMIT")
        return conn

    opener = threading.Thread(target=lambda: opened.append(SharedConnection(connect)))
    opener.start()
    assert inside.wait(10)
    threading.Timer(0.3, leave.set).start()  # the open ends a moment after the fork began
    statuses = [_acquire_in_child(path, SLOT + timedelta(minutes=n)) for n in range(3)]
    opener.join(10)
    assert statuses == [0, 0, 0]
    opened[0].close()


def test_a_file_locked_past_busy_timeout_at_open_names_the_lock_not_the_folder(
    tmp_path: Path,
) -> None:
    path = tmp_path / "relay.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("CREATE TABLE t (x)")
        other.execute("BEGIN EXCLUSIVE")  # another process in a long write
        with pytest.raises(BackendUnavailable) as refused:
            SQLiteLeaseBackend(path, busy_timeout=0.2)
        other.execute("ROLLBACK")
    message = str(refused.value)
    assert "database is locked" in message and "busy_timeout (0.2s)" in message
    assert "folder" not in message
    assert "folder exists" in _open_error(tmp_path / "no-such-folder" / "relay.db")


def _open_error(path: Path) -> str:
    with pytest.raises(BackendUnavailable) as refused:
        SQLiteLeaseBackend(path)
    return str(refused.value)
