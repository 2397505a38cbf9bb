"""Outcomes of consumer-mode runs: a RabbitMQ stream bounded by age, and how to read it back.

Each attempt that ends on a consumer appends one record to ``<prefix>.outcomes``, a stream
(``x-queue-type: stream``) whose broker drops segments older than ``x-max-age``: succeeded, failed
with attempts left (``pending``), failed on its last attempt (``failed``), or handed over
(``pending``, reason ``handed over``). What the broker decides alone, a run dead-lettered after a
death on its last attempt or when its TTL ended, is read from the job's dead queue instead.
Reading never declares anything: a stream that does not exist is :class:`StoreNotFound`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pika.adapters.blocking_connection import BlockingChannel

from relay.backends._amqp import answered_within
from relay.deadlines import DEFAULT_TIMEOUT
from relay.jobs import Job
from relay.runs import Run, RunRecord, RunState, from_ms, parse_run_id, slot_ms

__all__ = ["DEFAULT_MAX_AGE", "HANDED_OVER", "OutcomeStream", "fold", "outcome"]

DEFAULT_MAX_AGE = "7D"
"""How long the broker keeps outcome records unless the URL's ``outcomes_age`` says otherwise."""
HANDED_OVER = "handed over"
"""The reason of a ``pending`` record written when a stopping consumer handed its run over."""
_DEAD_REASONS = {"expired": "stale", "delivery_limit": "attempts used", "rejected": "attempts used"}
_READ_IDLE = 0.3
_PREFETCH = 500


def outcome(state: RunState, run: Run, job: Job) -> RunState:
    """What an attempt's end means for the run: failed for good only on its last attempt."""
    if state is RunState.FAILED and run.attempt < job.max_attempts:
        return RunState.PENDING
    return state


@dataclass(frozen=True)
class OutcomeStream:
    """The outcomes stream of one prefix."""

    name: str
    max_age: str = DEFAULT_MAX_AGE

    @property
    def arguments(self) -> dict[str, Any]:
        """The stream's arguments (every instance must declare the same)."""
        return {"x-queue-type": "stream", "x-max-age": self.max_age}

    def declare(self, channel: BlockingChannel) -> None:
        """Declare the stream."""
        channel.queue_declare(self.name, durable=True, arguments=self.arguments)

    def body(self, run: Run, state: RunState, reason: str | None, error: str | None) -> bytes:
        """One record: the attempt of ``run`` ended in ``state``."""
        record = {
            "run": run.id, "state": state.value, "attempt": run.attempt, "token": run.token,
            "owner": run.owner, "reason": reason, "error": error, "at": round(time.time() * 1000),
        }  # fmt: skip
        return json.dumps(record).encode()

    def read(
        self, channel: BlockingChannel, timeout: float = DEFAULT_TIMEOUT
    ) -> list[dict[str, Any]]:
        """Every record still in the stream, oldest first (raises if the stream is missing).

        Each request waits ``timeout`` seconds at most for the broker's answer; the read then
        ends once no record came for a while (:func:`answered_within`)."""
        records: list[dict[str, Any]] = []

        def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            records.append(json.loads(body))
            ch.basic_ack(method.delivery_tag)

        with answered_within(channel.connection, timeout):
            channel.queue_declare(self.name, passive=True)
            channel.basic_qos(prefetch_count=_PREFETCH)
            channel.basic_consume(self.name, on_message, arguments={"x-stream-offset": "first"})
        seen = -1
        while seen != len(records):  # streams never end: read until nothing came for a while
            seen = len(records)
            channel.connection.process_data_events(time_limit=_READ_IDLE)
        return records


def fold(
    records: Iterable[dict[str, Any]], dead: Iterable[tuple[str, str, str]]
) -> list[RunRecord]:
    """The latest record of each run, then each dead letter ``(run id, outcome, reason)`` on top
    (the broker's last word); newest slot first."""
    runs: dict[str, RunRecord] = {}
    for record in records:
        job, slot = parse_run_id(record["run"])
        state, reason = RunState(record["state"]), record["reason"]
        attempt = int(record["attempt"])
        ended_well = state is RunState.SUCCEEDED or reason == HANDED_OVER
        at = from_ms(int(record["at"]))
        runs[record["run"]] = RunRecord(
            id=record["run"], job=job, scheduled_for=slot, state=state, attempt=attempt,
            failures=attempt - 1 if ended_well else attempt, token=int(record["token"]),
            owner=record["owner"], reason=reason, expires_at=None, started_at=None,
            finished_at=at if state.final else None, error=record["error"],
        )  # fmt: skip
    for run_id, outcome, reason in dead:
        job, slot = parse_run_id(run_id)
        known = runs.get(run_id)
        runs[run_id] = RunRecord(
            id=run_id, job=job, scheduled_for=slot, state=RunState(outcome),
            attempt=known.attempt if known else 0, failures=known.failures if known else 0,
            token=known.token if known else 0, owner=known.owner if known else None,
            reason=_DEAD_REASONS.get(reason, reason), expires_at=None, started_at=None,
            finished_at=None, error=known.error if known else None,
        )  # fmt: skip
    return sorted(runs.values(), key=lambda r: slot_ms(r.scheduled_for), reverse=True)
