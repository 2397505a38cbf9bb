"""RabbitMQ consumer mode under Dramatiq: the closest honest equivalent of the Celery set-up.

Dramatiq's ``RabbitmqBroker`` declares every queue itself, classic, with its own arguments
(dead-lettering to ``<queue>.XQ``), and answers a failed message with a nack *without* requeue:
it cannot consume a quorum queue with ``x-delivery-limit``, nor have the broker redeliver a
failure. So with ``RelayMiddleware("amqp://…?mode=consumer")``:

* ``relay-dramatiq`` wins each run through its gate queue and publishes it to the job's quorum run
  queue (:meth:`~relay.consumer_mode.consumers.ConsumerDispatcher.dispatch`), not as a
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

import inspect
from collections.abc import Sequence
from typing import Any

import dramatiq

from relay import consumer_mode
from relay.contract import ClaimBackend, LeaseBackend
from relay.engine.dispatching import Dispatcher
from relay.errors import ConfigurationError
from relay.events import EventBus
from relay.jobs import Job
from relay.runs import Run

__all__ = [
    "STOP_TIMEOUT", "caller", "check_actor", "check_queues", "dispatcher", "serve", "stop_serving",
]  # fmt: skip

STOP_TIMEOUT = 10.0
"""Seconds a stopping worker waits for its consumer-mode runs before handing them over."""

Backend = ClaimBackend | LeaseBackend


def dispatcher(backend: Backend) -> Dispatcher | None:
    """The dispatcher of ``backend`` if it hands runs out itself (RabbitMQ consumer mode)."""
    return consumer_mode.dispatcher(backend)


def check_actor(backend: Backend, actor: dramatiq.Actor[Any, Any]) -> None:
    """Refuse, when the actor is declared, what consumer mode cannot run: ``async def`` actors."""
    if dispatcher(backend) is not None and inspect.iscoroutinefunction(inspect.unwrap(actor.fn)):
        raise ConfigurationError(
            f"periodic actor {actor.actor_name!r} is async, but RabbitMQ consumer mode calls "
            "periodic actors on Relay's consumer thread, synchronously: make it a plain def, "
            "or use a lease backend"
        )


def check_queues(backend: Backend, jobs: list[Job]) -> None:
    """Declare the jobs' run queues at start: one declared with other arguments (another
    ``max_attempts``) raises ``ConfigurationError`` naming the fix."""
    check_jobs = getattr(dispatcher(backend), "check_jobs", None)
    if check_jobs is not None:
        check_jobs(jobs)


def serve(backend: Backend, jobs: Sequence[Job], owner: str, events: EventBus) -> None:
    """Start consuming the run queues of ``jobs`` (each handler calling its actor, see
    :func:`caller`) in this process."""
    serving = dispatcher(backend)
    if serving is not None and jobs:
        serving.serve(list(jobs), owner, events)


def stop_serving(backend: Backend) -> None:
    """Stop consuming; runs not done within :data:`STOP_TIMEOUT` are handed over."""
    serving = dispatcher(backend)
    if serving is not None:
        serving.stop_serving(STOP_TIMEOUT)


def caller(actor: dramatiq.Actor[Any, Any]) -> Any:
    """A job handler that calls the actor's function, as consumer mode's consumers do."""

    def call(run: Run) -> None:
        actor.fn()

    return call
