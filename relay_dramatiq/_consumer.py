"""RabbitMQ consumer mode under Dramatiq: the closest honest equivalent of the Celery set-up.

Dramatiq's ``RabbitmqBroker`` declares every queue itself, classic, with its own arguments
(dead-lettering to ``<queue>.XQ``), and answers a failed message with a nack *without* requeue:
it cannot consume a quorum queue with ``x-delivery-limit``, nor have the broker redeliver a
failure. So with ``RelayMiddleware("amqp://…?mode=consumer")``:

* ``relay-dramatiq`` wins each run through its gate queue and publishes it to the job's quorum run
  queue (:meth:`~relay.backends.rabbitmq_consumer.RabbitMQConsumerBackend.dispatch`), not as a
  Dramatiq message;
* each Dramatiq worker process runs Relay's own consumers of those run queues next to Dramatiq's
  (started after the worker boots, stopped with a hand-over before it shuts down), and calls the
  periodic actor's function there, with :func:`relay_dramatiq.current_run` set.

What differs from a Dramatiq message: the call does not go through Dramatiq's middleware (no
``TimeLimit``, ``Callbacks``, ``Results``, ``Retries``; Relay's delivery limit retries instead) and
it runs on Relay's consumer thread, one run of each job at a time. ``async def`` actors are
refused: Relay's consumers call the function synchronously.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

import dramatiq

from relay.engine.dispatching import Dispatcher
from relay.errors import ConfigurationError
from relay.jobs import Job
from relay.runs import Run

if TYPE_CHECKING:
    from relay_dramatiq._middleware import RelayMiddleware

__all__ = ["STOP_TIMEOUT", "check_actor", "check_queues", "dispatcher", "serve", "stop_serving"]

STOP_TIMEOUT = 10.0
"""Seconds a stopping worker waits for its consumer-mode runs before handing them over."""


def dispatcher(middleware: RelayMiddleware[Any]) -> Dispatcher | None:
    """The middleware's backend if it hands runs out itself (RabbitMQ consumer mode)."""
    backend = middleware.backend
    return backend if isinstance(backend, Dispatcher) else None


def check_actor(middleware: RelayMiddleware[Any], actor: dramatiq.Actor[Any, Any]) -> None:
    """Refuse, when the actor is declared, what consumer mode cannot run: ``async def`` actors."""
    if dispatcher(middleware) is not None and inspect.iscoroutinefunction(inspect.unwrap(actor.fn)):
        raise ConfigurationError(
            f"periodic actor {actor.actor_name!r} is async, but RabbitMQ consumer mode calls "
            "periodic actors on Relay's consumer thread, synchronously: make it a plain def, "
            "or use a lease backend"
        )


def check_queues(middleware: RelayMiddleware[Any], jobs: list[Job]) -> None:
    """Declare the jobs' run queues at start: one declared with other arguments (another
    ``max_attempts``) raises ``ConfigurationError`` naming the fix."""
    backend = dispatcher(middleware)
    check_jobs = getattr(backend, "check_jobs", None)
    if check_jobs is not None:
        check_jobs(jobs)


def serve(middleware: RelayMiddleware[Any]) -> None:
    """Start consuming the run queues of the middleware's periodic actors in this process."""
    backend = dispatcher(middleware)
    if backend is None:
        return
    from relay_dramatiq._periodic import periodic_actors

    jobs: list[Job] = [
        dataclasses.replace(item.job, handler=_caller(item.actor))
        for item in periodic_actors()
        if item.middleware is middleware
    ]
    if jobs:
        backend.serve(jobs, middleware.owner, middleware.events)


def stop_serving(middleware: RelayMiddleware[Any]) -> None:
    """Stop consuming; runs not done within :data:`STOP_TIMEOUT` are handed over."""
    backend = dispatcher(middleware)
    if backend is not None:
        backend.stop_serving(STOP_TIMEOUT)


def _caller(actor: dramatiq.Actor[Any, Any]) -> Any:
    def call(run: Run) -> None:
        actor.fn()

    return call
