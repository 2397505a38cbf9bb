"""The running half of RabbitMQ consumer mode: one thread that runs what the broker hands out.

Its store half is a backend, :class:`~relay.backends.rabbitmq_consumer.RabbitMQConsumerBackend`
(the gate queues, the run queues, the outcomes stream); this is a host, beside the scheduler: it
runs the jobs' handlers through the engine's :class:`~relay.engine.Runner`. A host that wins runs
hands them to :class:`ConsumerDispatcher`, which publishes them and starts the consumers.

The thread owns its own connection (pika connections are not thread-safe) and one consumer per
job's run queue, each with a prefetch of 1. A delivered run is executed by the core's
:class:`~relay.engine.Runner` on a worker thread while the connection thread keeps the AMQP
heartbeats going; the outcome is settled back on the connection thread: ack on success, nack with
requeue on failure (the queue's delivery limit turns the last failure into a dead letter).

A run's attempt and token are the published ones plus the broker's ``x-delivery-count``. On
:meth:`JobConsumers.stop`, runs still going after the timeout are handed over: republished with
their attempt unchanged (confirmed), then acked, so the next consumer's attempt is the same one.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError

from relay.backends._amqp import answered_within, connect
from relay.backends._rabbitmq_outcomes import HANDED_OVER, outcome
from relay.backends._rabbitmq_queues import RunQueues, delivered
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.engine.coroutines import not_awaitable
from relay.engine.deciding import Won
from relay.engine.looping import MAX_BACKOFF
from relay.engine.running import Runner
from relay.errors import RelayError
from relay.events import EventBus
from relay.jobs import Job
from relay.runs import HEADER, Run, RunState, run_from_headers

__all__ = ["ConsumerDispatcher", "JobConsumers"]

log = logging.getLogger("relay.backends.rabbitmq")


class _Session:
    """One connection's consumers: runs in flight are settled on the connection they came on."""

    def __init__(self, connection: pika.BlockingConnection) -> None:
        self.connection = connection
        self.in_flight: dict[int, tuple[Run, Job]] = {}
        """The runs being executed, by delivery tag; settled or handed over, they leave."""


class JobConsumers:
    """Consumes the run queues of ``jobs`` on a background thread until :meth:`stop`."""

    def __init__(
        self,
        backend: RabbitMQConsumerBackend,
        parameters: pika.connection.Parameters,
        queues: RunQueues,
        jobs: Sequence[Job],
        owner: str,
        events: EventBus | None = None,
    ) -> None:
        self._backend = backend
        # A broker short of memory or disk blocks publishing connections: the backend's own
        # gives up after its timeout (blocked_connection_timeout), but this one only consumes
        # and settles, and dropping it would hand its runs in flight to another consumer.
        self._parameters = copy.copy(parameters)
        self._parameters.blocked_connection_timeout = None
        self._queues = queues
        self._jobs = [job for job in jobs if job.handler is not None]
        self._owner = owner
        self._runner = Runner(backend, owner=owner, lease=0.0, heartbeat=0.0, events=events)
        self._stopping = threading.Event()
        self.subscribed = threading.Event()
        """Set while the consumers are subscribed to every run queue."""
        self._stop_timeout = 0.0
        self._thread = threading.Thread(target=self._run, name="relay-consumers", daemon=True)

    def start(self) -> None:
        """Start consuming."""
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop taking runs; wait up to ``timeout`` for running ones, then close the connection:
        the broker gives unfinished runs to the next consumer."""
        self._stop_timeout = timeout
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout + 30)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                self._consume()
                backoff = 0.5
            except AMQPError as exc:
                log.warning("consumers lost RabbitMQ (%r); reconnecting in %.1fs", exc, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _consume(self) -> None:
        session = _Session(connect(self._parameters))
        # Each request waits for the broker's answer within the backend's timeout; consuming
        # itself waits in short slices, and a broker gone silent is found by the heartbeats.
        timeout = self._backend.timeout
        try:
            with answered_within(session.connection, timeout):
                channel = session.connection.channel()
                channel.basic_qos(prefetch_count=1)  # per consumer: one run of each job at a time
            tags = [self._subscribe(session, channel, job, timeout) for job in self._jobs]
            self.subscribed.set()
            log.info("consuming the run queues of %d job(s) as %s", len(tags), self._owner)
            while not self._stopping.is_set():
                session.connection.process_data_events(time_limit=0.2)
            for tag in tags:
                with answered_within(session.connection, timeout):
                    channel.basic_cancel(tag)
            deadline = time.monotonic() + self._stop_timeout
            while session.in_flight and time.monotonic() < deadline:
                session.connection.process_data_events(time_limit=0.1)
            self._hand_over(session, channel)
        finally:
            self.subscribed.clear()
            if session.connection.is_open:
                session.connection.close()

    def _subscribe(
        self, session: _Session, channel: BlockingChannel, job: Job, timeout: float
    ) -> str:
        """Declare the job's queues and consume its run queue; the consumer tag."""
        with answered_within(session.connection, timeout):
            queue = self._queues.declare(channel, job.name, job.max_attempts)
            tag: str = channel.basic_consume(queue, partial(self._deliver, session, job))
        return tag

    def _deliver(
        self,
        session: _Session,
        job: Job,
        channel: BlockingChannel,
        method: Any,
        properties: pika.BasicProperties,
        body: bytes,
    ) -> None:
        headers = properties.headers or {}
        run = run_from_headers(headers.get(HEADER))
        if run is None or run.job != job.name:
            log.error("dropping a message that carries no run of %s: %r", job.name, body[:200])
            channel.basic_reject(method.delivery_tag, requeue=False)
            return
        run = dataclasses.replace(delivered(run, headers), owner=self._owner)
        if run.attempt > job.max_attempts:  # handed over on its last attempt, then lost again
            log.error("%s used its %d attempts: dead-lettering it", run.id, job.max_attempts)
            channel.basic_reject(method.delivery_tag, requeue=False)
            return
        assert job.handler is not None
        session.in_flight[method.delivery_tag] = (run, job)
        # A daemon thread per run (prefetch 1: one per job at most): a stopped process exits
        # without waiting for a run it handed over, as the scheduler's own threads do.
        threading.Thread(
            target=self._execute,
            args=(session, channel, method.delivery_tag, run, job),
            name=f"relay-{run.id}",
            daemon=True,
        ).start()

    def _execute(
        self, session: _Session, channel: BlockingChannel, tag: int, run: Run, job: Job
    ) -> None:
        handler, errors = job.handler, []
        assert handler is not None

        def call(run: Run) -> None:
            try:
                not_awaitable(handler(run), handler, "RabbitMQ consumer mode")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                raise

        state: RunState | None = None
        try:
            state = self._runner.execute(run, call)
            if state is not None:
                self._backend.record(
                    run, outcome(state, run, job), error=errors[0] if errors else None
                )
        finally:
            settle = partial(self._settle, session, channel, tag, state)
            self._call_back(session, settle)

    def _hand_over(self, session: _Session, channel: BlockingChannel) -> None:
        """Republish each unfinished run with its attempt unchanged, confirmed, then ack it."""
        for tag, (run, job) in list(session.in_flight.items()):
            try:
                self._backend.publish(run, job.stale_after, job.max_attempts)
            except RelayError as exc:  # left unacked: redelivered, using an attempt
                log.warning("could not hand %s over: %s", run.id, exc)
                continue
            del session.in_flight[tag]
            channel.basic_ack(tag)
            log.info("handed %s over (attempt %d kept)", run.id, run.attempt)
            self._backend.record(run, RunState.PENDING, reason=HANDED_OVER)

    @staticmethod
    def _call_back(session: _Session, settle: partial[None]) -> None:
        try:
            session.connection.add_callback_threadsafe(settle)
        except AMQPError:  # the connection is gone: the broker redelivers the run
            log.warning("could not settle a run: its connection is closed")

    @staticmethod
    def _settle(
        session: _Session, channel: BlockingChannel, tag: int, state: RunState | None
    ) -> None:
        if session.in_flight.pop(tag, None) is None:
            return  # handed over: its delivery was acked when it was republished
        if not channel.is_open:
            return
        if state is RunState.SUCCEEDED:
            channel.basic_ack(tag)
        else:
            channel.basic_nack(tag, requeue=True)


class ConsumerDispatcher:
    """The engine's :class:`~relay.engine.dispatching.Dispatcher` for RabbitMQ consumer mode:
    each won run is published to its job's run queue, and this process's consumers run the runs
    the broker hands it. The consumers are kept on the backend (``backend.consumers``), so every
    dispatcher of one backend starts and stops the same ones."""

    def __init__(self, backend: RabbitMQConsumerBackend) -> None:
        self.backend = backend

    def dispatch(self, won: Won) -> None:
        """Publish ``won``'s run, confirmed; ``BackendUnavailable`` if the broker refused it."""
        self.backend.publish(won.run, won.job.stale_after, won.job.max_attempts)

    def check_jobs(self, jobs: Sequence[Job]) -> None:
        """Declare the jobs' queues now (see :meth:`RabbitMQConsumerBackend.check_jobs`)."""
        self.backend.check_jobs(jobs)

    def serve(self, jobs: Sequence[Job], owner: str, events: EventBus | None = None) -> None:
        """Start consuming the run queues of ``jobs`` as ``owner`` (once per backend)."""
        backend = self.backend
        if backend.consumers is None:
            backend.check_jobs(jobs)
            consumers = JobConsumers(
                backend, backend.parameters, backend.queues, jobs, owner, events
            )
            backend.consumers = consumers
            consumers.start()

    def stop_serving(self, timeout: float) -> None:
        """Stop taking runs; wait up to ``timeout`` for running ones, then hand the rest over."""
        consumers, self.backend.consumers = self.backend.consumers, None
        if consumers is not None:
            consumers.stop(timeout)
