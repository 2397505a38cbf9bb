"""Health means working: an instance whose steps have failed for longer than a lease, or whose
store needs a newer Relay, is unhealthy in ``relay health`` whatever its heartbeat says.

Real stores, with the loop's time on the fake clock: the store is broken the way a later Relay's
contraction breaks it (a table this Relay uses is gone), while the instances' table still takes
heartbeats.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from relay import open_backend
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.cli import main
from relay.engine import Decider, Loop, Won
from relay.errors import StoreTooNew
from relay.events import Event, EventBus, StoreIncompatible
from relay.instances import is_healthy
from relay.jobs import make_job
from relay.layout import Layout
from relay.testing import FakeClock
from tests.support.services import SERVICES

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc).timestamp()
LEASE = 30.0


def _loop(store: Any, clock: FakeClock, seen: list[Event]) -> Loop:
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    decider = Decider(store, owner="me:1:aa", lease=LEASE, clock=clock, events=bus)
    decider.add(make_job(store, name="job", every=10))
    return Loop(decider, interval=5, sweep_every=10, role="scheduler", monotonic=clock)


def _send(won: Won) -> bool:
    return True


def test_steps_failing_longer_than_a_lease_make_the_instance_unhealthy(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    store = SQLiteLeaseBackend(tmp_path / "relay.db", clock=clock)
    try:
        looped = _loop(store, clock, [])
        assert looped.step(_send).healthy
        [info] = store.instances()
        assert info.problem is None and is_healthy(info, store.now())
        with closing(sqlite3.connect(tmp_path / "relay.db")) as conn:
            conn.execute("ALTER TABLE relay_runs RENAME TO relay_runs_of_a_later_relay")
        clock.advance(10)
        assert not looped.step(_send, force=True).healthy
        clock.advance(LEASE - 5)
        assert not looped.step(_send, force=True).healthy  # failing, within a lease: no verdict
        [info] = store.instances()
        assert info.problem is None
        clock.advance(10)
        looped.step(_send, force=True)
        [info] = store.instances()
        assert info.problem is not None and "longer than a lease (30s)" in info.problem
        assert "relay_runs" in info.problem  # the first failure says why
        assert not is_healthy(info, store.now(), max_age=3600)  # whatever its last beat
        with closing(sqlite3.connect(tmp_path / "relay.db")) as conn:
            conn.execute("ALTER TABLE relay_runs_of_a_later_relay RENAME TO relay_runs")
        clock.advance(60)
        assert looped.step(_send, force=True).healthy
        [info] = store.instances()
        assert info.problem is None  # working again: cleared at once
    finally:
        store.close()


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    from tests.support.backends import postgres_lease

    with postgres_lease(tmp_path) as url:
        yield url


@pytest.mark.postgres
def test_a_store_that_needs_a_newer_relay_is_reported_and_unhealthy_at_once(pg_url: str) -> None:
    clock = FakeClock(T0)
    store = open_backend(pg_url)
    seen: list[Event] = []
    try:
        looped = _loop(store, clock, seen)
        assert looped.step(_send).healthy
        probe = ["health", "--backend", pg_url, "--max-age", "3600"]
        assert CliRunner().invoke(main, probe).exit_code == 0
        # Relay 0.3 contracts the schema: a table this Relay uses is gone, the floor is 0.3.
        with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{store.schema}".runs RENAME TO runs_0_3')  # type: ignore[attr-defined]
        store.record_layout(Layout(store.LAYOUT + 2, "0.3.0"))  # type: ignore[attr-defined]
        clock.advance(10)
        for _ in range(3):
            assert not looped.step(_send, force=True).healthy
            clock.advance(1)
        incompatible = [e for e in seen if isinstance(e, StoreIncompatible)]
        assert len(incompatible) == 1  # once, not at every retry
        assert "needs Relay 0.3 or newer; this is Relay 0.2: upgrade Relay" in incompatible[0].error
        assert "unavailable" not in incompatible[0].message()
        [info] = store.instances()
        assert info.problem is not None and "needs Relay 0.3" in info.problem  # within a lease
        said = CliRunner().invoke(main, probe)  # relay health, read-only, refuses the store
        assert said.exit_code == 1
    finally:
        store.close()


@pytest.mark.postgres
def test_relay_health_says_failing_and_why(pg_url: str) -> None:
    clock = FakeClock(T0)
    store = open_backend(pg_url)
    try:
        looped = _loop(store, clock, [])
        looped.step(_send)
        with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{store.schema}".runs RENAME TO runs_gone')  # type: ignore[attr-defined]
        for _ in range(3):
            clock.advance(LEASE / 2 + 1)
            looped.step(_send, force=True)
        said = CliRunner().invoke(main, ["health", "--backend", pg_url, "--max-age", "3600"])
        assert said.exit_code == 1, said.output
        assert "failing: scheduler me:1:aa (Relay 0.2.0" in said.output
        assert "longer than a lease" in said.output and "unhealthy" in said.output
    finally:
        store.close()


def test_store_too_new_is_a_backend_and_a_configuration_error() -> None:
    from relay.errors import BackendError, ConfigurationError

    error = StoreTooNew("schema 'relay'", 18, "0.3.0", "0.2.0")
    assert isinstance(error, BackendError) and isinstance(error, ConfigurationError)
    assert str(error).startswith(
        "schema 'relay' is at layout version 18, made by a newer Relay, which needs Relay 0.3 or "
        "newer; this is Relay 0.2: upgrade Relay"
    )


@pytest.mark.postgres
def test_a_running_run_whose_store_needs_a_newer_relay_is_let_go_not_raised(pg_url: str) -> None:
    from relay import AcquireRequest
    from relay.engine.running import Runner
    from relay.events import RunAbandoned

    store = open_backend(pg_url)
    seen: list[Event] = []
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    try:
        slot = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
        won = store.acquire(AcquireRequest("job", slot, "me:1:aa", 30)).run  # type: ignore[union-attr]
        assert won is not None
        active = Runner(store, owner="me:1:aa", lease=30, heartbeat=3600, events=bus).begin(won)
        assert active is not None
        with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{store.schema}".runs RENAME TO runs_0_3')  # type: ignore[attr-defined]
        store.record_layout(Layout(store.LAYOUT + 2, "0.3.0"))  # type: ignore[attr-defined]
        assert active.succeed() is None  # not recorded, and nothing raised into the host
        [abandoned] = [e for e in seen if isinstance(e, RunAbandoned)]
        assert abandoned.operation == "finish" and "needs Relay 0.3" in abandoned.error
    finally:
        store.close()
