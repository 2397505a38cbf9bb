"""RabbitMQ consumer mode (``amqp://…?mode=consumer``): the broker hands the runs out.

Deciding stays claim-only: each instance races for a run through the run's gate queue
(:class:`~relay.backends.rabbitmq.GateQueues`, the claim backend's logic). The winner then publishes
the run to its job's **run queue**, a quorum queue that every instance consumes from:

* single active consumer and a prefetch of 1: one instance runs the job's runs, one at a time; the
  next run waits in the queue instead of overlapping;
* the runner holds the message unacknowledged while the job runs; if its connection drops, the
  broker gives the message to the next consumer (a backup), with ``x-delivery-count`` + 1;
* a failed attempt is returned (nack, requeue); ``x-delivery-limit`` is the job's
  ``max_attempts - 1`` (each job has its own run queue), so the run gets at most ``max_attempts``
  deliveries, then is dead-lettered (reason ``delivery_limit``: failed) to the job's dead queue;
* a run's token and attempt grow with the broker's ``x-delivery-count``: the publisher stamps a
  token base (its clock in microseconds, strictly growing per job), and each delivery's token is
  ``base + x-delivery-count``, so a frozen consumer woken after a redelivery holds a stale token;
* a graceful stop hands its unfinished runs over: it republishes each with its attempt unchanged
  (confirmed), then acks the old delivery, so the hand-over uses no attempt;
* each attempt's outcome is appended to ``<prefix>.outcomes``, a stream bounded by age
  (``outcomes_age``, default 7 days), which :meth:`RabbitMQConsumerBackend.runs` (and so
  ``relay runs``) reads back with each job's dead letters;
* a per-message TTL ends ``stale_after`` after the slot: a run still waiting then is dead-lettered
  (reason ``expired``: skipped).

What this mode does not guarantee is in ``docs/backends/rabbitmq-consumer.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, Literal, Protocol

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError, ChannelClosedByBroker, NackError, UnroutableError

from relay.backends import _amqp as amqp
from relay.backends._rabbitmq_outcomes import DEFAULT_MAX_AGE, OutcomeStream, fold, outcome
from relay.backends._rabbitmq_queues import (
    MAX_ATTEMPTS,
    DeadRun,
    RunQueues,
    dead_run,
    delivered,
    refused_queue,
)
from relay.backends._url import BackendURL
from relay.backends.rabbitmq import DEFAULT_RETENTION, RabbitMQClaimBackend
from relay.deadlines import DEFAULT_TIMEOUT
from relay.errors import BackendUnavailable, ConfigurationError, RelayError, StoreNotFound
from relay.jobs import DEFAULT_MAX_ATTEMPTS, Job
from relay.runs import HEADER, Run, RunRecord, RunState, parse_run_id, run_to_headers, slot_ms

__all__ = [
    "MAX_ATTEMPTS", "Consumers", "DeadRun", "RabbitMQConsumerBackend", "RunQueues", "delivered",
    "outcome",
]  # fmt: skip

log = logging.getLogger("relay.backends.rabbitmq")
_OPTIONS = (
    "mode", "prefix", "retention", "max_attempts", "consumer_timeout", "outcomes_age", "timeout",
)  # fmt: skip
_AGE = re.compile(r"^[1-9][0-9]*(Y|M|D|h|m|s)$")
_DRIVER_OPTIONS = ("heartbeat", "socket_timeout", "connection_attempts", "retry_delay")


class Consumers(Protocol):
    """A process's consumers of the run queues, as a host runs them."""

    subscribed: threading.Event
    """Set while they are subscribed to every run queue."""

    def stop(self, timeout: float) -> None:
        """Stop taking runs; wait up to ``timeout`` for running ones, then hand the rest over."""


class RabbitMQConsumerBackend:
    """Gate queues decide who publishes a run; quorum queues hand the runs to one consumer."""

    capability: Literal["claim"] = "claim"
    job_options = frozenset({"max_attempts"})
    """Lease-only job options this claim backend honours: ``max_attempts``, per run queue."""
    deferrable = False
    """Opened at once even by ``open_backend(url, deferred=True)``: hosts hand it their runs."""
    readable_runs = True
    """``open_backend(url, read_only=True)`` may open it: :meth:`runs` reads the outcomes."""

    def __init__(
        self,
        parameters: pika.connection.Parameters,
        *,
        prefix: str = "relay",
        retention: float = DEFAULT_RETENTION,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        consumer_timeout: float | None = None,
        location: str = "RabbitMQ",
        outcomes_age: str = DEFAULT_MAX_AGE,
        read_only: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.read_only = read_only
        """Opened to read outcomes only (``relay runs``): nothing is declared."""
        self.outcomes = OutcomeStream(RunQueues._name(f"{prefix}.outcomes"), outcomes_age)
        self.gate = RabbitMQClaimBackend(
            parameters, prefix=f"{prefix}.claim", retention=retention, location=location,
            timeout=timeout,
        )  # fmt: skip
        self.timeout = self.gate.timeout
        """Seconds each operation may wait for the broker (connects: the ``parameters``' own)."""
        self.queues = RunQueues(prefix, max_attempts, consumer_timeout)
        self.location = location
        self._parameters = parameters
        self._lock = threading.Lock()  # pika connections are not thread-safe
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._declared: set[str] = set()
        self.consumers: Consumers | None = None
        """This process's consumers of the run queues, while a host serves
        (:class:`relay.consumer_mode.consumers.ConsumerDispatcher`); stopped on :meth:`close`."""
        self._bases: dict[str, int] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RabbitMQConsumerBackend:
        """Connect as an ``amqp://…?mode=consumer`` URL says.

        Options: ``prefix`` of every queue (default ``relay``), ``retention`` of the gate queues
        (seconds, default 600), ``max_attempts`` of every job (default 3), ``consumer_timeout``
        (seconds; RabbitMQ 3.12+), ``timeout`` in seconds for each connect and operation,
        publisher confirms included (default 2), and pika's ``heartbeat``, ``socket_timeout``,
        ``connection_attempts``, ``retry_delay``.
        """
        parsed = BackendURL(url)
        parsed.check_options(
            [*_OPTIONS, *_DRIVER_OPTIONS, *amqp.TLS_OPTIONS], "RabbitMQ consumer mode"
        )
        if parsed.option("mode", "consumer") != "consumer":
            raise ConfigurationError(f"mode={parsed.options['mode']!r} is not known: use consumer")
        attempts = parsed.option("max_attempts", str(DEFAULT_MAX_ATTEMPTS))
        if not attempts.isdigit() or not 1 <= int(attempts) <= MAX_ATTEMPTS:
            raise ConfigurationError(
                f"max_attempts={attempts!r} must be a whole number from 1 to {MAX_ATTEMPTS}"
            )
        age = parsed.option("outcomes_age", DEFAULT_MAX_AGE)
        if not _AGE.match(age):
            raise ConfigurationError(
                f"outcomes_age={age!r} must be a number and a unit (Y, M, D, h, m or s), e.g. 7D"
            )
        consumer_timeout = None
        if "consumer_timeout" in parsed.options:
            consumer_timeout = parsed.float_option("consumer_timeout", 0)
        timeout = amqp.timeout_of(parsed)
        return cls(
            amqp.pika_parameters(parsed, _OPTIONS, timeout),
            prefix=parsed.option("prefix", "relay"),
            retention=parsed.float_option("retention", DEFAULT_RETENTION),
            max_attempts=int(attempts),
            consumer_timeout=consumer_timeout,
            location=parsed.redacted(),
            outcomes_age=age,
            timeout=timeout,
            **kwargs,
        )

    @property
    def parameters(self) -> pika.connection.Parameters:
        """pika's connection parameters (host, port, virtual host) of the broker."""
        return self._parameters

    @property
    def name(self) -> str:
        return f"RabbitMQ consumer mode (max_attempts={self.queues.max_attempts})"

    # -- claiming: the gate queues -----------------------------------------------------------

    @property
    def remembers_for(self) -> float | None:
        return self.gate.remembers_for

    def claim(self, job: str, slot: datetime) -> bool:
        return self.gate.claim(job, slot)

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        return self.gate.claim_many(runs)

    # -- publishing: the run to its job's run queue -----------------------------------------

    def stamp(self, run: Run) -> Run:
        """``run`` with a fresh token base: this process's clock in microseconds, and above
        every base it stamped for the job before by at least :data:`MAX_ATTEMPTS`, so each
        delivery's ``base + x-delivery-count`` stays below the next run's tokens."""
        with self._lock:
            base = max(time.time_ns() // 1000, self._bases.get(run.job, 0) + MAX_ATTEMPTS)
            self._bases[run.job] = base
        return dataclasses.replace(run, token=base)

    def check_jobs(self, jobs: Sequence[Job]) -> None:
        """Declare each job's queues now, so a queue declared with other arguments (another
        ``max_attempts``, ``prefix`` or ``consumer_timeout``) fails at start, naming the fix."""
        for job in jobs:
            if job.max_attempts > MAX_ATTEMPTS:
                raise ConfigurationError(
                    f"job {job.name!r}: max_attempts={job.max_attempts} is above {MAX_ATTEMPTS}, "
                    "the most RabbitMQ consumer mode can fence; lower it"
                )
            with self._lock, self._translated(job), self._answered() as channel:
                self.queues.declare(channel, job.name, job.max_attempts)
                self._declared.add(job.name)

    def publish(
        self, run: Run, stale_after: float | None = None, max_attempts: int | None = None
    ) -> None:
        """Publish a won run to its job's run queue, confirmed, with a fresh token base; it
        expires ``stale_after`` after its slot (measured on this instance's clock when
        publishing, then on the broker's). ``run.attempt`` is the attempt its first delivery
        makes: 1 for a new run, the same attempt for a run handed over."""
        run = self.stamp(run)
        expiration = None
        if stale_after is not None:
            left = stale_after * 1000 - (time.time() * 1000 - slot_ms(run.scheduled_for))
            expiration = str(max(0, int(left)))
        properties = pika.BasicProperties(
            delivery_mode=pika.DeliveryMode.Persistent, message_id=run.id,
            headers={HEADER: run_to_headers(run)}, expiration=expiration,
            content_type="application/json",
        )  # fmt: skip
        body = json.dumps({"run": run.id}).encode()
        with self._lock, self._translated(), self._answered() as channel:
            if run.job not in self._declared:
                self.queues.declare(channel, run.job, max_attempts)
                self._declared.add(run.job)
            try:
                channel.basic_publish(
                    "", self.queues.run_queue(run.job), body, properties, mandatory=True
                )
            except (NackError, UnroutableError) as exc:
                raise BackendUnavailable(f"RabbitMQ refused run {run.id}: {exc!r}") from exc

    # -- serving: this process's consumers of the run queues --------------------------------

    def wait_subscribed(self, timeout: float) -> bool:
        """Wait until this process's consumers (:attr:`consumers`, started by a host) are
        subscribed to their run queues."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            consumers = self.consumers
            if consumers is not None and consumers.subscribed.wait(0.05):
                return True
            time.sleep(0.05)
        return False

    def dead_runs(self, job: str, limit: int = 100) -> list[DeadRun]:
        """The runs of ``job`` dead-lettered so far (read without removing them or declaring
        anything)."""
        dead: list[DeadRun] = []
        with self._lock, self._translated(), self._answered() as ready:
            channel = ready.connection.channel()
            try:
                channel.queue_declare(self.queues.dead_queue(job), passive=True)
                while len(dead) < limit:
                    method, properties, body = channel.basic_get(self.queues.dead_queue(job))
                    if method is None:
                        break
                    dead.append(dead_run(properties, body))
            except ChannelClosedByBroker as exc:
                if exc.reply_code != amqp.NOT_FOUND:
                    raise
                return []  # no dead queue yet: nothing was dead-lettered
            finally:
                with suppress(AMQPError):
                    channel.close()  # unacknowledged: the messages stay in the queue
        return dead

    # -- outcomes: the stream ----------------------------------------------------------------

    def record(
        self, run: Run, state: RunState, *, reason: str | None = None, error: str | None = None
    ) -> bool:
        """Append the outcome of one attempt of ``run`` to the outcomes stream (confirmed);
        ``False`` (logged) if the broker could not take it: recording never fails a run."""
        body = self.outcomes.body(run, state, reason, error)
        try:
            with self._lock, self._translated(), self._answered() as channel:
                if self.outcomes.name not in self._declared:
                    self.outcomes.declare(channel)
                    self._declared.add(self.outcomes.name)
                channel.basic_publish("", self.outcomes.name, body, mandatory=True)
        except (RelayError, NackError, UnroutableError) as exc:
            log.warning("could not record the outcome of %s: %r", run.id, exc)
            return False
        return True

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The latest outcome of the most recent runs (of ``job``), newest slot first: the
        outcomes stream, with each job's dead letters on top. Declares nothing; a missing
        stream raises :class:`~relay.errors.StoreNotFound`."""
        with self._translated():
            connection = amqp.connect(self._parameters)
            try:
                with amqp.answered_within(connection, self.timeout):
                    channel = connection.channel()
                records = self.outcomes.read(channel, self.timeout)
            except ChannelClosedByBroker as exc:
                if exc.reply_code != amqp.NOT_FOUND:
                    raise
                raise StoreNotFound(
                    f"no outcomes stream {self.outcomes.name!r} at {self.location}: no consumer "
                    "with this prefix has finished a run yet, or the prefix is not theirs"
                ) from None
            finally:
                if connection.is_open:
                    connection.close()
        records = [r for r in records if job is None or parse_run_id(r["run"])[0] == job]
        jobs = {parse_run_id(r["run"])[0] for r in records} | ({job} if job else set())
        dead = [(d.run_id, d.outcome, d.reason) for name in sorted(jobs)
                for d in self.dead_runs(name, limit=10_000)]  # fmt: skip
        return fold(records, dead)[:limit]

    def close(self) -> None:
        consumers, self.consumers = self.consumers, None
        if consumers is not None:
            consumers.stop(0)
        with self._lock:
            connection, self._connection, self._channel = self._connection, None, None
            amqp.close_quietly(connection)
        self.gate.close()

    # -- connection --------------------------------------------------------------------------

    @contextmanager
    def _answered(self) -> Iterator[BlockingChannel]:
        """The ready channel; every wait on its connection in the block ends within
        :attr:`timeout` (:func:`relay.backends._amqp.answered_within`)."""
        channel = self._ready_channel()
        with amqp.answered_within(channel.connection, self.timeout):
            yield channel

    def _ready_channel(self) -> BlockingChannel:
        if self._connection is not None and self._connection.is_open:
            try:
                # Between ticks nobody services this connection: the broker may have dropped it
                # for missed heartbeats. Find out before publishing, not by losing a run.
                with amqp.answered_within(self._connection, self.timeout):
                    self._connection.process_data_events(time_limit=0)
            except AMQPError:
                self._connection = None
        before = self._connection
        self._connection, self._channel = amqp.confirm_channel(
            self._connection, self._channel, self._parameters, self.timeout
        )
        if self._connection is not before:
            self._declared.clear()  # a new connection: declare the queues again
        return self._channel

    @contextmanager
    def _translated(self, job: Job | None = None) -> Iterator[None]:
        try:
            yield
        except ChannelClosedByBroker as exc:
            self._channel = None
            if exc.reply_code == amqp.PRECONDITION_FAILED:
                raise ConfigurationError(refused_queue(str(exc.reply_text), job)) from exc
            raise amqp.refused(self.location, exc, self.queues.prefix) from exc
        except AMQPError as exc:
            self._connection = None
            raise amqp.unreachable(self.location, exc) from exc
