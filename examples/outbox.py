"""An outbox: a periodic Celery job that changes business state and publishes it, each effect once.

``close_day`` runs every night through Relay. A run can be attempted twice (its worker died after
committing, its lease expired, a beat re-published it), so it must not add a second total, nor
announce the total twice. Three pieces do it:

1. **The job** writes the day's total *and* the message announcing it in **one transaction**,
   both keyed by the run id (unique constraints). A second attempt of the same run finds them and
   writes nothing: the business change and the intent to publish commit together, or not at all.
2. **The publisher** (itself a periodic Relay job) sends the unpublished messages, then marks them
   published. It may send a message twice: a crash after sending and before marking sends it again
   on the next pass. Marking first would instead lose the message on a crash.
3. **The consumer** records each message id in an inbox table in the same transaction as its own
   effect. A duplicate finds its id there and changes nothing.

Run it with a Redis broker and PostgreSQL (``DATABASE_URL``)::

    celery -A outbox worker --loglevel INFO
    celery -A outbox beat --loglevel INFO        # two or more
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import psycopg
from celery import Celery
from celery.schedules import crontab

import relay
import relay_celery

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = os.environ.get("OUTBOX_SCHEMA", "shop")

app = Celery("outbox", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    beat_scheduler="relay_celery.RelayScheduler",
    relay_backend=os.environ.get("RELAY_BACKEND", f"{DATABASE_URL}?schema=relay"),
    beat_schedule={
        "close-day": {
            "task": "outbox.close_day",
            "schedule": crontab(minute=5, hour=0),
        },
        "publish-outbox": {
            "task": "outbox.publish",
            "schedule": timedelta(seconds=5),
        },
    },
    relay_jobs={
        "close-day": {"max_attempts": 5, "catch_up": 6 * 3600},
        "publish-outbox": {"overlap": "skip"},
    },
)
relay_celery.install(app)

TABLES = """
CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY, day date NOT NULL, amount_cents bigint NOT NULL);
CREATE TABLE IF NOT EXISTS daily_totals (
    day date PRIMARY KEY, total_cents bigint NOT NULL, run_id text NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS outbox (
    id bigserial PRIMARY KEY, message_id text NOT NULL UNIQUE, topic text NOT NULL,
    payload jsonb NOT NULL, published_at timestamptz);
CREATE TABLE IF NOT EXISTS inbox (
    message_id text PRIMARY KEY, received_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS ledger (
    day date PRIMARY KEY, total_cents bigint NOT NULL);
"""


def connect() -> psycopg.Connection[Any]:
    """A connection whose tables live in ``SCHEMA`` (created if needed)."""
    conn = psycopg.connect(DATABASE_URL, autocommit=True, options=f"-c search_path={SCHEMA}")
    with conn.transaction():
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"')
        conn.execute(TABLES)
    return conn


# -- 1. the job: business state and the intent to publish, in one transaction ---------------------


def record_close(conn: psycopg.Connection[Any], run: relay.Run) -> bool:
    """Total the orders of the day before the run's slot; ``False`` if this run already did."""
    day = run.scheduled_for.date() - timedelta(days=1)
    with conn.transaction():
        total = conn.execute(
            "SELECT coalesce(sum(amount_cents), 0) FROM orders WHERE day = %s", (day,)
        ).fetchone()
        assert total is not None
        inserted = conn.execute(
            "INSERT INTO daily_totals (day, total_cents, run_id) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id) DO NOTHING",
            (day, total[0], run.id),
        ).rowcount
        if inserted == 0:
            return False  # a previous attempt of this run committed both rows
        payload = {"day": day.isoformat(), "total_cents": int(total[0])}
        conn.execute(
            "INSERT INTO outbox (message_id, topic, payload) VALUES (%s, %s, %s)",
            (f"{run.id}/daily-total", "daily-total", json.dumps(payload)),
        )
    return True


@app.task(name="outbox.close_day")
def close_day() -> None:
    """The periodic task: its run id keys both the total and the message."""
    run = relay_celery.current_run()
    if run is None:
        raise RuntimeError("close_day runs from beat, through Relay: it needs the run id")
    with connect() as conn:
        record_close(conn, run)


# -- 2. the publisher: sends, then marks; a crash in between sends twice --------------------------


@dataclass(frozen=True)
class Message:
    """One row of the outbox."""

    message_id: str
    topic: str
    payload: dict[str, Any]


def publish_pending(conn: psycopg.Connection[Any], send: Callable[[Message], None]) -> int:
    """Send every unpublished message in order, marking each after it was sent; how many sent."""
    sent = 0
    while True:
        with conn.transaction():
            row = conn.execute(
                "SELECT id, message_id, topic, payload FROM outbox WHERE published_at IS NULL "
                "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
            ).fetchone()
            if row is None:
                return sent
            send(Message(row[1], row[2], row[3]))  # a crash after this line sends it again
            conn.execute("UPDATE outbox SET published_at = now() WHERE id = %s", (row[0],))
        sent += 1


@app.task(name="outbox.publish")
def publish() -> None:
    """The periodic publisher: each message becomes a task for the consumer."""
    with connect() as conn:
        publish_pending(
            conn,
            lambda m: app.send_task("outbox.on_daily_total", args=(m.message_id, m.payload)),
        )


# -- 3. the consumer: de-duplicates by message id, in the transaction of its own effect -----------


def consume(conn: psycopg.Connection[Any], message_id: str, payload: dict[str, Any]) -> bool:
    """Apply a daily total to the ledger once; ``False`` for a duplicate."""
    with conn.transaction():
        first = conn.execute(
            "INSERT INTO inbox (message_id) VALUES (%s) ON CONFLICT DO NOTHING", (message_id,)
        ).rowcount
        if first == 0:
            return False
        conn.execute(
            "INSERT INTO ledger (day, total_cents) VALUES (%s, %s)",
            (date.fromisoformat(payload["day"]), payload["total_cents"]),
        )
    return True


@app.task(name="outbox.on_daily_total")
def on_daily_total(message_id: str, payload: dict[str, Any]) -> None:
    """The consumer task: at-least-once delivery, applied once."""
    with connect() as conn:
        consume(conn, message_id, payload)
