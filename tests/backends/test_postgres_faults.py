"""PostgreSQL under faults: a server of our own, crashed and restarted under real instances.

Leases live on disk, so a restart costs nothing but the seconds the server is away: instances
reconnect through their pools and carry on, and no run is won twice. An instance whose clock is
off by an hour cannot take a live lease, because the server's clock alone decides expiry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from relay import (
    AcquireRequest,
    BackendUnavailable,
    LeaseBackend,
    Outcome,
    RunState,
    open_backend,
)
from tests.backends import pg_procs
from tests.backends.pg_server import OwnPostgres, find_bin
from tests.support import procs
from tests.support.backends import unique

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
UTC = timezone.utc


@pytest.fixture(scope="module")
def server() -> Iterator[OwnPostgres]:
    bindir = find_bin()
    if bindir is None:
        reason = "PostgreSQL's initdb and pg_ctl are not installed: cannot start a server to crash"
        if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    own = OwnPostgres(bindir)
    own.start()
    yield own
    own.stop()


@pytest.fixture
def url(server: OwnPostgres) -> Iterator[str]:
    schema = unique()
    yield f"{server.url}?schema={schema}"
    with psycopg.connect(server.url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_restart_mid_run_gives_no_second_winner_and_instances_carry_on(
    server: OwnPostgres, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "executions.jsonl"
    open_backend(url).close()  # create the schema once, before the instances race for it
    options = {"url": url, "lease": 30, "heartbeat": 0.5, "work": 2.5, "log": str(log)}
    instances = [
        pg_procs.spawn("instance", {**options, "owner": f"i{n}"}, tmp_path / f"i{n}.err")
        for n in range(3)
    ]
    try:
        for proc in instances:
            assert procs.next_event(proc)["event"] == "ready"
        _wait_for_executions(log, 3, timeout=30)
        server.restart("immediate")  # a crash: runs are mid-way, with leases held
        restarted_at = time.time()
        _wait_for_executions(log, 3, timeout=60, after=restarted_at + 0.5)
        for proc in instances:
            assert proc.poll() is None, (tmp_path / "i0.err").read_text()
            proc.send_signal(signal.SIGTERM)
        for proc in instances:
            proc.wait(timeout=60)
            assert proc.returncode == 0
    finally:
        for proc in instances:
            _stop(proc)
    executions = [json.loads(line) for line in log.read_text().splitlines()]
    counts = Counter(e["run"] for e in executions)
    assert set(counts.values()) == {1}, [run for run, n in counts.items() if n > 1]
    backend = open_backend(url)
    assert backend.capability == "lease"
    records = {r.id: r for r in backend.runs("every-second", limit=10_000)}
    backend.close()
    for execution in executions:
        record = records[execution["run"]]
        assert record.attempt == 1 and record.token == execution["token"], record
        assert record.state is RunState.SUCCEEDED, record  # finished despite the crash


def test_leases_survive_a_crash_and_their_holder_keeps_them(server: OwnPostgres, url: str) -> None:
    backend = _lease_backend(url)
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    holder = procs.spawn(
        "hold",
        {"url": url, "job": "held", "slot": int(slot.timestamp() * 1000), "owner": "holder",
         "lease": 4, "heartbeat": 0.5},
    )  # fmt: skip
    try:
        held = procs.next_event(holder)
        server.restart("immediate")
        deadline = time.monotonic() + 10  # well past the 4 s lease: heartbeats resumed
        while time.monotonic() < deadline:
            result = _acquire_when_up(backend, AcquireRequest("held", slot, "rival", 30, 3))
            assert result.outcome is Outcome.HELD, result
            time.sleep(0.5)
        assert holder.poll() is None
        _stop(holder)
        deadline = time.monotonic() + 20  # nobody heartbeats now: the lease expires
        rival = AcquireRequest("held", slot, "rival", 30, 3)
        while (result := backend.acquire(rival)).outcome is Outcome.HELD:
            assert time.monotonic() < deadline, "the dead holder's lease never expired"
            time.sleep(0.2)
        assert result.outcome is Outcome.WON and result.run is not None
        assert result.run.token > held["token"] and result.run.attempt == 2
    finally:
        _stop(holder)
        backend.close()


def test_a_server_that_is_down_is_unavailable_then_the_pool_reconnects(
    server: OwnPostgres, url: str
) -> None:
    backend = _lease_backend(url + "&pool_timeout=1")
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    try:
        won = backend.acquire(AcquireRequest("outage", slot, "a", 60))
        assert won.run is not None
        server.halt()
        try:
            for step in (
                backend.now,
                lambda: backend.acquire(AcquireRequest("outage", slot, "b", 60)),
                lambda: backend.heartbeat(won.run.id, won.run.token, 60),  # type: ignore[union-attr]
            ):
                with pytest.raises(BackendUnavailable):
                    step()
        finally:
            server.start()
        result = _acquire_when_up(backend, AcquireRequest("outage", slot, "b", 60))
        assert result.outcome is Outcome.HELD  # the lease outlived the outage, on disk
        backend.finish(won.run.id, won.run.token, succeeded=True)
    finally:
        backend.close()


@pytest.mark.parametrize("offset", [3600, -3600])
def test_a_rival_whose_clock_is_an_hour_off_cannot_take_a_live_lease(
    url: str, tmp_path: Path, offset: int
) -> None:
    slot = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    holder = procs.spawn(
        "hold",
        {"url": url, "job": "skew", "slot": int(slot.timestamp() * 1000), "owner": "holder",
         "lease": 20, "heartbeat": 0.5},
    )  # fmt: skip
    try:
        held = procs.next_event(holder)
        skewed = pg_procs.spawn(
            "skewed",
            {"url": url, "job": "skew", "slot": int(slot.timestamp() * 1000), "offset": offset},
            tmp_path / "skewed.err",
        )
        seen = procs.next_event(skewed, timeout=60)
        procs.finish(skewed)
    finally:
        _stop(holder)
    assert abs(seen["my_clock_lead"] - offset) < 60  # the shift was in effect
    assert abs(seen["store_clock_lag"]) < 60  # while the server's clock was not shifted
    assert seen["outcome"] == Outcome.HELD.value
    assert held["run"] not in seen["reclaimable"] and seen["swept"] == []


def test_a_holder_whose_clock_is_an_hour_behind_keeps_its_lease(url: str, tmp_path: Path) -> None:
    backend = _lease_backend(url)
    slot = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    holder = pg_procs.spawn(
        "hold",
        {"url": url, "job": "late", "slot": int(slot.timestamp() * 1000), "owner": "holder",
         "lease": 2, "heartbeat": 0.4, "offset": -3600},
        tmp_path / "holder.err",
    )  # fmt: skip
    try:
        procs.next_event(holder)
        deadline = time.monotonic() + 5  # more than twice its lease: renewals on the server's clock
        while time.monotonic() < deadline:
            result = backend.acquire(AcquireRequest("late", slot, "rival", 30, 3))
            assert result.outcome is Outcome.HELD, result
            assert not backend.reclaimable()
            time.sleep(0.3)
        assert holder.poll() is None, (tmp_path / "holder.err").read_text()
    finally:
        _stop(holder)
        backend.close()


def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill the process unless that was done already (its pipes are then closed)."""
    if proc.stdout is not None and not proc.stdout.closed:
        procs.kill(proc)


def _lease_backend(url: str) -> LeaseBackend:
    backend = open_backend(url)
    assert backend.capability == "lease"
    return backend


def _acquire_when_up(backend: LeaseBackend, request: AcquireRequest):  # type: ignore[no-untyped-def]
    """Acquire, retrying while the server is still coming back."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return backend.acquire(request)
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _wait_for_executions(log: Path, count: int, timeout: float, after: float = 0.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            lines = [json.loads(line) for line in log.read_text().splitlines() if line]
            if sum(1 for e in lines if e["at"] > after) >= count:
                return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} executions after {after} within {timeout}s")
