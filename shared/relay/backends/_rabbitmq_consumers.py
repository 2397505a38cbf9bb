"""The consuming half of RabbitMQ consumer mode: one thread that runs what the broker hands out.

The thread owns its own connection (pika connections are not thread-safe) and one consumer per
job's run queue, each with a prefetch of 1. A delivered run is executed by the core's
:class:`~relay.engine.Runner` on a worker thread while the connection thread keeps the AMQP
heartbeats going; the outcome is settled back on the connection thread: ack on success, nack with
requeue on failure (the queue's delivery limit turns the last failure into a dead letter).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError

from relay.contract import ClaimBackend
from relay.engine.looping import MAX_BACKOFF
from relay.engine.running import Runner
from relay.jobs import Job
from relay.runs import HEADER, RunState, run_from_headers

if TYPE_CHECKING:
    from relay.backends.rabbitmq_consumer import RunQueues

__all__ = ["JobConsumers"]

log = logging.getLogger("relay.backends.rabbitmq")


class _Session:
    """One connection's consumers: runs in flight are settled on the connection they came on."""

    def __init__(self, connection: pika.BlockingConnection) -> None:
        self.connection = connection
        self.in_flight = 0


class JobConsumers:
    """Consumes the run queues of ``jobs`` on a background thread until :meth:`stop`."""

    def __init__(
        self,
        backend: ClaimBackend,
        parameters: pika.connection.Parameters,
        queues: RunQueues,
        jobs: Sequence[Job],
        owner: str,
    ) -> None:
        self._parameters = parameters
        self._queues = queues
        self._jobs = [job for job in jobs if job.handler is not None]
        self._owner = owner
        self._runner = Runner(backend, owner=owner, lease=0.0, heartbeat=0.0)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self._jobs)), thread_name_prefix="relay-consume"
        )
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
        self._pool.shutdown(wait=False, cancel_futures=True)

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
        session = _Session(pika.BlockingConnection(self._parameters))
        try:
            channel = session.connection.channel()
            channel.basic_qos(prefetch_count=1)  # per consumer: one run of each job at a time
            tags = [
                channel.basic_consume(
                    self._queues.declare(channel, job.name), partial(self._deliver, session, job)
                )
                for job in self._jobs
            ]
            self.subscribed.set()
            while not self._stopping.is_set():
                session.connection.process_data_events(time_limit=0.2)
            for tag in tags:
                channel.basic_cancel(tag)
            deadline = time.monotonic() + self._stop_timeout
            while session.in_flight and time.monotonic() < deadline:
                session.connection.process_data_events(time_limit=0.1)
        finally:
            self.subscribed.clear()
            if session.connection.is_open:
                session.connection.close()

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
        attempt = int(headers.get("x-delivery-count", 0)) + 1
        run = dataclasses.replace(run, attempt=attempt, owner=self._owner)
        assert job.handler is not None
        session.in_flight += 1
        future = self._pool.submit(self._runner.execute, run, job.handler)
        settle = partial(self._settle, session, channel, method.delivery_tag, future)
        future.add_done_callback(lambda _: self._call_back(session, settle))

    @staticmethod
    def _call_back(session: _Session, settle: partial[None]) -> None:
        try:
            session.connection.add_callback_threadsafe(settle)
        except AMQPError:  # the connection is gone: the broker redelivers the run
            log.warning("could not settle a run: its connection is closed")

    @staticmethod
    def _settle(
        session: _Session, channel: BlockingChannel, tag: int, future: Future[RunState | None]
    ) -> None:
        session.in_flight -= 1
        succeeded = not future.cancelled() and future.exception() is None
        succeeded = succeeded and future.result() is RunState.SUCCEEDED
        if not channel.is_open:
            return
        if succeeded:
            channel.basic_ack(tag)
        else:
            channel.basic_nack(tag, requeue=True)
