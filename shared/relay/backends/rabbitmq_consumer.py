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
* a per-message TTL ends ``stale_after`` after the slot: a run still waiting then is dead-lettered
  (reason ``expired``: skipped).

What this mode does not guarantee is in ``docs/backends/rabbitmq-consumer.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError, ChannelClosedByBroker, NackError, UnroutableError

from relay.backends._rabbitmq_consumers import JobConsumers, delivered
from relay.backends._url import BackendURL
from relay.backends.rabbitmq import DEFAULT_RETENTION, RabbitMQClaimBackend, pika_parameters
from relay.engine.deciding import Won
from relay.errors import BackendUnavailable, ConfigurationError
from relay.jobs import DEFAULT_MAX_ATTEMPTS, Job
from relay.runs import HEADER, Run, run_to_headers, slot_ms

__all__ = ["MAX_ATTEMPTS", "DeadRun", "RabbitMQConsumerBackend", "RunQueues", "delivered"]

log = logging.getLogger("relay.backends.rabbitmq")
_OPTIONS = ("mode", "prefix", "retention", "max_attempts", "consumer_timeout")
_DRIVER_OPTIONS = ("heartbeat", "socket_timeout", "connection_attempts", "retry_delay")
_MAX_QUEUE_NAME = 255
_PRECONDITION_FAILED = 406
_NOT_FOUND = 404
_OUTCOMES = {"delivery_limit": "failed", "rejected": "failed", "expired": "skipped"}
MAX_ATTEMPTS = 1000
"""The most attempts a job may have here: a token base leaves room for this many deliveries."""
_INEQUIVALENT = re.compile(r"inequivalent arg '([^']+)' for queue '([^']+)'.*current is (.*)$")


@dataclass(frozen=True)
class RunQueues:
    """The run queue and dead queue of each job; every instance must declare them alike."""

    prefix: str = "relay"
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    consumer_timeout: float | None = None

    def run_queue(self, job: str) -> str:
        """Where the job's runs wait for the active consumer."""
        return self._name(f"{self.prefix}.run.{job}")

    def dead_queue(self, job: str) -> str:
        """Where the job's failed and stale runs are dead-lettered."""
        return self._name(f"{self.prefix}.dead.{job}")

    def arguments(self, job: str, max_attempts: int | None = None) -> dict[str, Any]:
        """The run queue's arguments; ``max_attempts`` is the job's (default: the URL's)."""
        attempts = self.max_attempts if max_attempts is None else max_attempts
        arguments: dict[str, Any] = {
            "x-queue-type": "quorum",
            "x-single-active-consumer": True,
            "x-delivery-limit": attempts - 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.dead_queue(job),
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",  # at-least-once dead-lettering needs it
        }
        if self.consumer_timeout is not None:
            arguments["x-consumer-timeout"] = int(self.consumer_timeout * 1000)
        return arguments

    def declare(self, channel: BlockingChannel, job: str, max_attempts: int | None = None) -> str:
        """Declare the job's dead queue, then its run queue; return the run queue's name."""
        channel.queue_declare(
            self.dead_queue(job), durable=True, arguments={"x-queue-type": "quorum"}
        )
        name = self.run_queue(job)
        channel.queue_declare(name, durable=True, arguments=self.arguments(job, max_attempts))
        return name

    @staticmethod
    def _name(name: str) -> str:
        if len(name.encode()) <= _MAX_QUEUE_NAME:
            return name
        return f"{name[:180]}.{hashlib.sha256(name.encode()).hexdigest()}"


@dataclass(frozen=True)
class DeadRun:
    """A run dead-lettered from its job's run queue: ``outcome`` is failed or skipped."""

    run_id: str
    outcome: str
    reason: str


class RabbitMQConsumerBackend:
    """Gate queues decide who publishes a run; quorum queues hand the runs to one consumer."""

    capability: Literal["claim"] = "claim"
    job_options = frozenset({"max_attempts"})
    """Lease-only job options this claim backend honours: ``max_attempts``, per run queue."""

    def __init__(
        self,
        parameters: pika.connection.Parameters,
        *,
        prefix: str = "relay",
        retention: float = DEFAULT_RETENTION,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        consumer_timeout: float | None = None,
        location: str = "RabbitMQ",
    ) -> None:
        self.gate = RabbitMQClaimBackend(
            parameters, prefix=f"{prefix}.claim", retention=retention, location=location
        )
        self.queues = RunQueues(prefix, max_attempts, consumer_timeout)
        self.location = location
        self._parameters = parameters
        self._lock = threading.Lock()  # pika connections are not thread-safe
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._declared: set[str] = set()
        self._consumers: JobConsumers | None = None
        self._bases: dict[str, int] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RabbitMQConsumerBackend:
        """Connect as an ``amqp://…?mode=consumer`` URL says.

        Options: ``prefix`` of every queue (default ``relay``), ``retention`` of the gate queues
        (seconds, default 600), ``max_attempts`` of every job (default 3), ``consumer_timeout``
        (seconds; RabbitMQ 3.12+), and pika's ``heartbeat``, ``socket_timeout``,
        ``connection_attempts``, ``retry_delay``.
        """
        parsed = BackendURL(url)
        parsed.check_options([*_OPTIONS, *_DRIVER_OPTIONS], "RabbitMQ consumer mode")
        if parsed.option("mode", "consumer") != "consumer":
            raise ConfigurationError(f"mode={parsed.options['mode']!r} is not known: use consumer")
        attempts = parsed.option("max_attempts", str(DEFAULT_MAX_ATTEMPTS))
        if not attempts.isdigit() or not 1 <= int(attempts) <= MAX_ATTEMPTS:
            raise ConfigurationError(
                f"max_attempts={attempts!r} must be a whole number from 1 to {MAX_ATTEMPTS}"
            )
        timeout = None
        if "consumer_timeout" in parsed.options:
            timeout = parsed.float_option("consumer_timeout", 0)
        return cls(
            pika_parameters(parsed, _OPTIONS),
            prefix=parsed.option("prefix", "relay"),
            retention=parsed.float_option("retention", DEFAULT_RETENTION),
            max_attempts=int(attempts),
            consumer_timeout=timeout,
            location=parsed.redacted(),
            **kwargs,
        )

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

    # -- dispatching: publish the run to its job's run queue ---------------------------------

    def dispatch(self, won: Won) -> None:
        self.publish(won.run, won.job.stale_after, won.job.max_attempts)

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
            with self._lock, self._translated(job):
                self.queues.declare(self._ready_channel(), job.name, job.max_attempts)
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
        with self._lock, self._translated():
            channel = self._ready_channel()
            if run.job not in self._declared:
                self.queues.declare(channel, run.job, max_attempts)
                self._declared.add(run.job)
            try:
                channel.basic_publish(
                    "", self.queues.run_queue(run.job), body, properties, mandatory=True
                )
            except (NackError, UnroutableError) as exc:
                raise BackendUnavailable(f"RabbitMQ refused run {run.id}: {exc!r}") from exc

    # -- serving: consume the run queues -----------------------------------------------------

    def serve(self, jobs: Sequence[Job], owner: str) -> None:
        if self._consumers is None:
            self.check_jobs(jobs)
            self._consumers = JobConsumers(self, self._parameters, self.queues, jobs, owner)
            self._consumers.start()

    def stop_serving(self, timeout: float) -> None:
        consumers, self._consumers = self._consumers, None
        if consumers is not None:
            consumers.stop(timeout)

    def wait_subscribed(self, timeout: float) -> bool:
        """Wait until :meth:`serve` has subscribed this process to its run queues."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            consumers = self._consumers
            if consumers is not None and consumers.subscribed.wait(0.05):
                return True
            time.sleep(0.05)
        return False

    def dead_runs(self, job: str, limit: int = 100) -> list[DeadRun]:
        """The runs of ``job`` dead-lettered so far (read without removing them or declaring
        anything)."""
        dead: list[DeadRun] = []
        with self._lock, self._translated():
            channel = self._ready_channel().connection.channel()
            try:
                channel.queue_declare(self.queues.dead_queue(job), passive=True)
                while len(dead) < limit:
                    method, properties, body = channel.basic_get(self.queues.dead_queue(job))
                    if method is None:
                        break
                    dead.append(_dead_run(properties, body))
            except ChannelClosedByBroker as exc:
                if exc.reply_code != _NOT_FOUND:
                    raise
                return []  # no dead queue yet: nothing was dead-lettered
            finally:
                with suppress(AMQPError):
                    channel.close()  # unacknowledged: the messages stay in the queue
        return dead

    def close(self) -> None:
        self.stop_serving(0)
        with self._lock:
            connection, self._connection, self._channel = self._connection, None, None
            if connection is not None and connection.is_open:
                with suppress(AMQPError):
                    connection.close()
        self.gate.close()

    # -- connection --------------------------------------------------------------------------

    def _ready_channel(self) -> BlockingChannel:
        if self._connection is not None and self._connection.is_open:
            try:
                # Between ticks nobody services this connection: the broker may have dropped it
                # for missed heartbeats. Find out before publishing, not by losing a run.
                self._connection.process_data_events(time_limit=0)
            except AMQPError:
                self._connection = None
        if self._connection is None or not self._connection.is_open:
            self._connection = pika.BlockingConnection(self._parameters)
            self._channel = None
            self._declared.clear()
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    @contextmanager
    def _translated(self, job: Job | None = None) -> Iterator[None]:
        try:
            yield
        except ChannelClosedByBroker as exc:
            self._channel = None
            if exc.reply_code == _PRECONDITION_FAILED:
                raise ConfigurationError(_refused_queue(str(exc.reply_text), job)) from exc
            raise BackendUnavailable(f"RabbitMQ at {self.location} refused: {exc}") from exc
        except AMQPError as exc:
            self._connection = None
            raise BackendUnavailable(
                f"cannot reach RabbitMQ at {self.location} ({exc!r}): check that the broker is "
                "running and that the URL's host, port and credentials are right"
            ) from exc


def _refused_queue(reply: str, job: Job | None) -> str:
    found = _INEQUIVALENT.search(reply)
    if job is not None and found and found.group(1) == "x-delivery-limit":
        current = re.search(r"'(-?\d+)'", found.group(3))
        wanted = f"max_attempts={int(current.group(1)) + 1}" if current else "no max_attempts"
        return (
            f"job {job.name!r} has max_attempts={job.max_attempts}, but its run queue "
            f"{found.group(2)!r} already exists with {found.group(1)} {found.group(3)}: set "
            f"{wanted} on the job, or delete the queue to change it (rabbitmqctl delete_queue "
            f"{found.group(2)}; runs waiting in it are lost)"
        )
    return (
        f"RabbitMQ refused a run queue ({reply}): every instance must use the same prefix, "
        "max_attempts and consumer_timeout; delete the old queue to change them"
    )


def _dead_run(properties: pika.BasicProperties, body: bytes) -> DeadRun:
    headers = properties.headers or {}
    deaths = headers.get("x-death") or [{}]
    reason = str(deaths[0].get("reason", "unknown"))
    run = headers.get(HEADER) or {}
    return DeadRun(
        str(run.get("id", body.decode(errors="replace"))), _OUTCOMES.get(reason, reason), reason
    )
