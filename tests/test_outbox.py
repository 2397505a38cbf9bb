"""examples/outbox.py against the real PostgreSQL: each effect once, though steps run twice."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from datetime import date, datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import celery._state
import psycopg
import pytest

import relay
from tests.support import services
from tests.support.backends import postgres_lease, unique

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "outbox.py"
SLOT = datetime(2026, 11, 30, 0, 5, tzinfo=timezone.utc)

pytestmark = [
    pytest.mark.postgres,
    # Each test loads the example afresh (its own schema), so one process builds its Celery app
    # more than once. @app.task shares tasks with every app finalized later, so the second app
    # also receives the first app's tasks under the same names; Celery 5.7 warns about that.
    # One load per process, as in production, never does. (By its text: the warning's class is
    # new in 5.7, and Relay supports Celery 5.6.)
    pytest.mark.filterwarnings(
        "ignore:Task name .* is already registered:celery.exceptions.CeleryWarning"
    ),
]


@pytest.fixture
def outbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ModuleType]:
    """The example module, its tables in a fresh schema, its Relay store in another."""
    base, schema = services.require("postgres"), unique("outbox_t")
    with postgres_lease(tmp_path) as relay_url:
        monkeypatch.setenv("DATABASE_URL", base)
        monkeypatch.setenv("OUTBOX_SCHEMA", schema)
        monkeypatch.setenv("RELAY_BACKEND", relay_url)
        # The example's @app.task is shared with every app finalized later in this process: keep
        # it out of the apps of tests that run after this one (test_celery_kit's worker failed at
        # start-up on two copies of 'outbox.close_day' once the suite's order changed).
        finalizers = set(celery._state._on_app_finalizers)
        monkeypatch.setattr(celery._state, "_on_app_finalizers", finalizers)
        spec = importlib.util.spec_from_file_location(f"outbox_{schema}", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        try:
            yield module
        finally:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def attempt(number: int, token: int) -> relay.Run:
    return relay.Run(relay.run_id("close-day", SLOT), "close-day", SLOT, number, token, "test")


def rows(conn: psycopg.Connection[Any], query: str) -> list[tuple[Any, ...]]:
    return conn.execute(query).fetchall()


def test_a_second_attempt_of_the_run_records_nothing_more(outbox: ModuleType) -> None:
    with outbox.connect() as conn:
        conn.execute("INSERT INTO orders (day, amount_cents) VALUES ('2026-11-29', 1500)")
        conn.execute("INSERT INTO orders (day, amount_cents) VALUES ('2026-11-29', 499)")
        assert outbox.record_close(conn, attempt(1, 41)) is True
        # The worker died after its commit; the run was taken over: attempt 2, a newer token.
        assert outbox.record_close(conn, attempt(2, 42)) is False
        assert rows(conn, "SELECT day, total_cents FROM daily_totals") == [
            (date(2026, 11, 29), 1999)
        ]
        assert rows(conn, "SELECT message_id FROM outbox") == [
            ("close-day@2026-11-30T00:05:00Z/daily-total",)
        ]


def test_the_total_and_its_message_commit_together_or_not_at_all(outbox: ModuleType) -> None:
    with outbox.connect() as conn:
        # The message's insert fails (its id is taken), after the total was inserted.
        conn.execute(
            "INSERT INTO outbox (message_id, topic, payload) "
            "VALUES ('close-day@2026-11-30T00:05:00Z/daily-total', 'x', '{}')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            outbox.record_close(conn, attempt(1, 41))
        assert rows(conn, "SELECT * FROM daily_totals") == []


def test_a_publisher_that_sends_twice_is_absorbed_by_the_consumer(outbox: ModuleType) -> None:
    delivered: list[Any] = []

    def crash_after_sending(message: Any) -> None:
        delivered.append(message)
        raise ConnectionError("publisher killed after the broker accepted the message")

    with outbox.connect() as conn:
        conn.execute("INSERT INTO orders (day, amount_cents) VALUES ('2026-11-29', 700)")
        outbox.record_close(conn, attempt(1, 41))
        with pytest.raises(ConnectionError):
            outbox.publish_pending(conn, crash_after_sending)
        assert rows(conn, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == [(1,)]
        assert outbox.publish_pending(conn, delivered.append) == 1  # the next pass: sent again
        assert outbox.publish_pending(conn, delivered.append) == 0
        assert [m.message_id for m in delivered] == [delivered[0].message_id] * 2
        applied = [outbox.consume(conn, m.message_id, m.payload) for m in delivered]
        assert applied == [True, False]
        assert rows(conn, "SELECT day, total_cents FROM ledger") == [(date(2026, 11, 29), 700)]


def test_beat_builds_both_periodic_jobs_on_the_postgresql_store(outbox: ModuleType) -> None:
    from relay_celery import RelayScheduler

    beat = RelayScheduler(outbox.app)
    try:
        jobs = beat.decider.jobs
        assert jobs["close-day"].max_attempts == 5
        assert jobs["publish-outbox"].overlap == "skip"
        assert beat.settings.backend.startswith("postgresql://")
    finally:
        beat.close()
