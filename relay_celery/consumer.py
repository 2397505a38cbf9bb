"""RabbitMQ consumer mode in a Celery app: ``relay_backend = "amqp://…?mode=consumer"``.

Beat still wins each run through its gate queue; it then publishes the entry's task to the job's
**run queue** (``<prefix>.run.<entry>``, a quorum queue with the job's ``x-delivery-limit``,
dead-lettering to ``<prefix>.dead.<entry>``) through Celery's own producer, with publisher
confirms and a per-message TTL of ``stale_after``. Workers consume those queues as Celery queues
(kombu ``Queue`` objects with the queue arguments, added by :func:`setup_worker`), with late acks,
``reject_on_worker_lost`` and a prefetch multiplier of 1, so the broker redelivers a run whose
worker or pool child died. A failed attempt is rejected with requeue: the broker redelivers it
until the job's limit, then dead-letters it as failed. Each delivery's token and attempt grow
with the broker's ``x-delivery-count`` (:func:`relay.backends.rabbitmq_consumer.delivered`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.exceptions import Reject
from celery.schedules import maybe_schedule
from kombu import Exchange, Queue

from relay.backends import Backend
from relay.engine import Won
from relay.errors import ConfigurationError
from relay.jobs import Job, make_job
from relay.runs import Run, RunState, slot_ms
from relay_celery.entries import entry_options, jobs_options
from relay_celery.schedules import schedule_options

log = logging.getLogger("relay.celery")

if TYPE_CHECKING:
    from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend

__all__ = [
    "ConsumerMode",
    "check_broker",
    "consumer_backend",
    "entry_jobs",
    "run_delivery",
    "setup_worker",
]


def consumer_backend(backend: Backend) -> RabbitMQConsumerBackend | None:
    """``backend`` if it is RabbitMQ in consumer mode (imported only when it is one)."""
    if type(backend).__module__ != "relay.backends.rabbitmq_consumer":
        return None
    from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend

    return backend if isinstance(backend, RabbitMQConsumerBackend) else None


def run_queue(backend: RabbitMQConsumerBackend, job: Job) -> Queue:
    """The job's run queue as a kombu queue: default exchange, the same arguments as Relay's."""
    name = backend.queues.run_queue(job.name)
    arguments = backend.queues.arguments(job.name, job.max_attempts)
    return Queue(name, Exchange(""), routing_key=name, durable=True, queue_arguments=arguments)


def check_broker(app: Celery, backend: RabbitMQConsumerBackend) -> None:
    """Refuse an app whose broker is not the RabbitMQ the backend URL names: its run queues would
    not be quorum queues (another transport ignores the queue arguments), or not the ones the
    beats' gates and ``dead_runs`` see (another virtual host)."""
    connection = app.connection_for_write()
    try:
        driver, vhost = connection.transport.driver_type, connection.virtual_host or "/"
        host = f"{connection.hostname}:{connection.port}"
    finally:
        connection.release()
    if driver != "amqp":
        raise ConfigurationError(
            f"relay_backend is RabbitMQ consumer mode, but the app's broker is {driver}: its run "
            "queues must be RabbitMQ quorum queues. Use a RabbitMQ broker (amqp://…), or a lease "
            "backend (sqlite, postgresql, redis, nats) with this broker"
        )
    parameters = backend.parameters
    if vhost != parameters.virtual_host:
        raise ConfigurationError(
            f"relay_backend names RabbitMQ virtual host {parameters.virtual_host!r}, but the app's "
            f"broker uses {vhost!r}: give relay_backend the broker's virtual host"
        )
    if host != f"{parameters.host}:{parameters.port}":
        log.warning(
            "relay_backend's RabbitMQ (%s:%s) and the app's broker (%s) look like different "
            "hosts: they must be the same broker",
            parameters.host, parameters.port, host,
        )  # fmt: skip


class ConsumerMode:
    """Beat's side: route each won run to its job's run queue, on a confirmed connection."""

    def __init__(self, app: Celery, backend: RabbitMQConsumerBackend) -> None:
        check_broker(app, backend)
        self.app = app
        self.backend = backend
        self._producer: Any = None
        self._connection: Any = None

    def route(self, won: Won) -> tuple[Run, dict[str, Any]]:
        """The run stamped with its token base, and the ``apply_async`` options that send it."""
        run = self.backend.stamp(won.run)
        options: dict[str, Any] = {
            "queue": run_queue(self.backend, won.job),
            "producer": self.producer(),
        }
        if won.job.stale_after is not None:
            age = time.time() - slot_ms(run.scheduled_for) / 1000
            options["expiration"] = max(0.0, won.job.stale_after - age)
        return run, options

    def producer(self) -> Any:
        """A producer whose channel waits for the broker's confirm of each publish."""
        if self._producer is None:
            self._connection = self.app.connection_for_write(
                transport_options={"confirm_publish": True}
            )
            self._producer = self.app.amqp.Producer(self._connection, auto_declare=False)
        return self._producer

    def close(self) -> None:
        """Close the confirmed connection."""
        connection, self._connection, self._producer = self._connection, None, None
        if connection is not None:
            connection.release()


def entry_jobs(app: Celery, backend: Backend) -> dict[str, tuple[str, Job]]:
    """Each ``beat_schedule`` entry's task name and Relay job, as beat builds them (options from
    ``app.conf.relay_jobs`` or the entry's ``"relay"`` key)."""
    entries = dict(app.conf.beat_schedule or {})
    carried = {name: entry_options(name, entry.get("relay")) for name, entry in entries.items()}
    options = jobs_options(app.conf.get("relay_jobs"), carried, entries)
    jobs = {}
    for name, entry in entries.items():
        schedule = maybe_schedule(entry["schedule"], app=app)
        job = make_job(
            backend,
            name=name,
            **schedule_options(name, schedule, app.timezone),
            **options.get(name, {}),
        )
        jobs[name] = (entry["task"], job)
    return jobs


def setup_worker(worker: Any, backend: RabbitMQConsumerBackend) -> dict[str, Job]:
    """Make ``worker`` consume every entry's run queue with late acks, ``reject_on_worker_lost``
    and a prefetch multiplier of 1; check the queues' arguments first (a mismatch stops the
    worker with the fix). Returns the jobs by name."""
    app: Celery = worker.app
    check_broker(app, backend)
    jobs = entry_jobs(app, backend)
    backend.check_jobs([job for _, job in jobs.values()])
    for task_name, job in jobs.values():
        app.amqp.queues.select_add(run_queue(backend, job))
        task = app.tasks[task_name]
        task.acks_late = True
        task.reject_on_worker_lost = True
    worker.prefetch_multiplier = 1
    return {name: job for name, (_, job) in jobs.items()}


def run_delivery(
    run: Run, request: Any, jobs: dict[str, Job], call: Callable[[Run], Any], backend: Backend
) -> Any:
    """Call ``call`` with the run this delivery carries; a failure is rejected with requeue, so
    the broker redelivers it (one attempt used) until the job's delivery limit. The attempt's
    outcome goes to the outcomes stream through ``backend`` (this process's)."""
    from relay.backends.rabbitmq_consumer import delivered, outcome

    headers = {"x-delivery-count": request.get("x-delivery-count")}
    if isinstance(request.headers, dict) and "x-delivery-count" in request.headers:
        headers["x-delivery-count"] = request.headers["x-delivery-count"]
    run = delivered(run, headers)
    job = jobs.get(run.job)
    if job is not None and run.attempt > job.max_attempts:
        raise Reject(f"{run.id} used its {job.max_attempts} attempts", requeue=False)
    consumer = consumer_backend(backend)
    try:
        result = call(run)
    except Exception as exc:
        if consumer is not None and job is not None:
            state = outcome(RunState.FAILED, run, job)
            consumer.record(run, state, error=f"{type(exc).__name__}: {exc}")
        raise Reject(exc, requeue=True) from exc
    if consumer is not None:
        consumer.record(run, RunState.SUCCEEDED)
    return result
