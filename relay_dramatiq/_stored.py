"""Stored schedules under Dramatiq: the actors they may run, and the message each run sends.

Whoever can write to the store must not be able to run any actor with any arguments: a stored
schedule runs only an actor allowed with :func:`schedulable` (or ``relay-dramatiq --schedulable
NAME``). Its run is enqueued like a periodic actor's (the run and its token in the message's
``relay_run`` option, so the middleware starts and finishes it), with the stored ``args`` and
``kwargs`` as the actor's own arguments and the stored ``options`` mapped to Dramatiq's message
options (:data:`MESSAGE_OPTIONS`). What cannot apply under Dramatiq is refused when the scheduler
meets the schedule: reported by a ``ScheduleNotRunnable`` event, never sent.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, TypeVar

import dramatiq
from dramatiq.broker import Broker
from dramatiq.common import q_name
from dramatiq.errors import ActorNotFound

from relay.backends import LEASE_BACKENDS
from relay.errors import ConfigurationError, UnsupportedOption
from relay.runs import HEADER, Run
from relay.schedule_store import stores_schedules
from relay.stored import Schedule
from relay_dramatiq._middleware import RelayMiddleware
from relay_dramatiq._periodic import check_coroutine, check_retries, middleware_of

__all__ = [
    "ALLOW_WITH",
    "MESSAGE_OPTIONS",
    "StoredMessage",
    "check_schedulable",
    "schedulable",
    "schedulable_actors",
    "stored_message",
]

A = TypeVar("A", bound="dramatiq.Actor[Any, Any]")

MESSAGE_OPTIONS = ("queue_name", "delay", "time_limit", "broker_priority")
"""The stored ``options`` a Dramatiq run applies, in Dramatiq's own names and units:
``queue_name`` (one of the app's queues), ``delay`` (milliseconds, shorter than the middleware's
``queue_lease``), ``time_limit`` (milliseconds, for Dramatiq's ``TimeLimit``) and
``broker_priority`` (a ``RabbitmqBroker`` with ``max_priority`` only)."""
_RETRIES = ("max_retries", "retry_when", "min_backoff", "max_backoff", "throws")
ALLOW_WITH = "relay_dramatiq.schedulable"
"""How an actor is allowed, in the ``ScheduleNotRunnable`` reason of one that is not."""

_registry: dict[dramatiq.Actor[Any, Any], None] = {}


def schedulable(actor: A) -> A:
    """Allow stored schedules (:meth:`relay.Control.add_schedule`) to run ``actor``.

    Put it above ``@dramatiq.actor`` (or call it on an actor). A stored schedule names the actor
    by its ``actor_name``; each run is a message with the schedule's ``args`` and ``kwargs`` as
    the actor's arguments, started and finished by the :class:`RelayMiddleware` on its broker,
    whose backend must be a lease backend (it keeps the schedules, else ``UnsupportedOption``).
    As for ``@periodic``, the middleware must be on the broker before the actor is declared, and
    Relay owns retries (the schedule's ``max_attempts``), so the actor sets no ``max_retries``.
    ``relay-dramatiq`` allows every actor so marked in the modules it imports.
    """
    if not isinstance(actor, dramatiq.Actor):
        raise TypeError("@schedulable goes above @dramatiq.actor, on an actor")
    check_schedulable(actor)
    if actor in _registry:
        raise ConfigurationError(f"actor {actor.actor_name!r} is already schedulable")
    _registry[actor] = None
    return actor


def schedulable_actors(broker: Broker | None = None) -> list[dramatiq.Actor[Any, Any]]:
    """Every actor allowed with :func:`schedulable` in this process, in declaration order; with
    ``broker``, then those its :class:`RelayMiddleware` names in ``schedulable`` (Django:
    ``RELAY["SCHEDULABLE_TASKS"]``), looked up on it: a name it has no actor of is refused
    (``ConfigurationError`` naming the fix)."""
    actors = list(_registry)
    if broker is None:
        return actors
    for middleware in broker.middleware:
        if not isinstance(middleware, RelayMiddleware):
            continue
        for name in middleware.schedulable:
            try:
                actor = broker.get_actor(name)
            except ActorNotFound:
                raise ConfigurationError(
                    f"{middleware.schedulable_source} names actor {name!r}, but the broker has "
                    "no actor of that name: import the module that declares it (from the app "
                    "module relay-dramatiq imports), or remove it from the list"
                ) from None
            if actor not in actors:
                actors.append(actor)
    return actors


def check_schedulable(actor: dramatiq.Actor[Any, Any]) -> RelayMiddleware[Any]:
    """The middleware whose store keeps the schedules that may run ``actor``; refuses an actor
    workers could run without it, one that retries on its own, or a store that keeps none."""
    middleware = middleware_of(actor, "schedulable")
    if not stores_schedules(middleware.backend):
        raise UnsupportedOption("schedulable", middleware.backend.name, LEASE_BACKENDS)
    check_retries(actor, "schedulable", "on each stored schedule, add_schedule")
    check_coroutine(actor, "schedulable")
    return middleware


class StoredMessage:
    """A stored schedule's handler under Dramatiq: its actor's message, with the stored
    arguments and options (one small object per stored schedule)."""

    __slots__ = ("actor", "args", "delay", "kwargs", "options", "queue_name")

    def __init__(
        self,
        actor: dramatiq.Actor[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
        queue_name: str | None,
        delay: int | None,
    ) -> None:
        self.actor, self.args, self.kwargs, self.options = actor, args, kwargs, options
        self.queue_name, self.delay = queue_name, delay

    def send(self, header: Any) -> None:
        """Enqueue the run: ``header`` is the run's ``relay_run`` option, with its token."""
        # max_retries=0: Relay retries a failed run itself, with a new token.
        options = {**self.options, HEADER: header, "max_retries": 0}
        message = self.actor.message_with_options(
            args=self.args, kwargs=dict(self.kwargs), **options
        )
        if self.queue_name is not None:
            message = message.copy(queue_name=self.queue_name)
        self.actor.broker.enqueue(message, delay=self.delay)

    def __call__(self, run: Run) -> Any:
        """Call the actor's function with the stored arguments, in this process."""
        return self.actor.fn(*self.args, **self.kwargs)


def stored_message(
    actor: dramatiq.Actor[Any, Any], schedule: Schedule, queue_lease: float
) -> StoredMessage:
    """The message ``schedule`` sends to ``actor``; ``ConfigurationError`` naming the fix for
    arguments the actor does not take or an option that cannot apply under Dramatiq."""
    try:
        inspect.signature(actor.fn).bind(*schedule.args, **schedule.kwargs)
    except TypeError as exc:
        raise ConfigurationError(
            f"its arguments do not fit actor {actor.actor_name!r}: {exc}; edit its args/kwargs"
        ) from None
    options = dict(schedule.options)
    for name in options:
        _check_known(name)
    queue_name = options.pop("queue_name", None)
    if queue_name is not None:
        _check_queue(actor, queue_name)
    delay = options.pop("delay", None)
    if delay is not None:
        _check_delay(delay, queue_lease)
    if "time_limit" in options:
        _check_ms("time_limit", options["time_limit"], minimum=1)
    if "broker_priority" in options:
        _check_priority(actor, options["broker_priority"])
    return StoredMessage(actor, schedule.args, schedule.kwargs, options, queue_name, delay)


def _check_known(name: str) -> None:
    if name in _RETRIES:
        raise ConfigurationError(
            f"option {name!r} is Dramatiq's own retrying, but Relay retries a failed run itself, "
            "with a new token: drop it and set the schedule's max_attempts"
        )
    if name == "priority":
        raise ConfigurationError(
            "option 'priority' is an actor's in Dramatiq (@dramatiq.actor(priority=...)), not a "
            "message's: drop it, or use 'broker_priority' on a RabbitmqBroker with max_priority"
        )
    if name not in MESSAGE_OPTIONS:
        raise ConfigurationError(
            f"option {name!r} is not one relay-dramatiq applies to a message: drop it; the "
            f"options it applies are {', '.join(MESSAGE_OPTIONS)}"
        )


def _check_queue(actor: dramatiq.Actor[Any, Any], queue_name: Any) -> None:
    # A delay queue (``q.DQ``) is the broker's own: no worker consumes it as a queue.
    queues = sorted(q for q in actor.broker.get_declared_queues() if q == q_name(q))
    if queue_name not in queues:
        raise ConfigurationError(
            f"option 'queue_name' is {queue_name!r}, not a queue of this app's actors, so no "
            f"worker would take the message: use one of {', '.join(map(repr, queues))}"
        )


def _check_ms(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"option {name!r} is {value!r}: give whole milliseconds, at least {minimum}"
        )


def _check_delay(delay: Any, queue_lease: float) -> None:
    _check_ms("delay", delay, minimum=0)
    if delay >= queue_lease * 1000:
        raise ConfigurationError(
            f"option 'delay' ({delay} ms) is not shorter than the middleware's queue_lease "
            f"({queue_lease:g} s), so every run would be taken over before it is delivered: "
            "shorten the delay, or raise RelayMiddleware(queue_lease=...)"
        )


def _check_priority(actor: dramatiq.Actor[Any, Any], priority: Any) -> None:
    highest = getattr(actor.broker, "max_priority", None)
    if not isinstance(highest, int):
        raise ConfigurationError(
            "option 'broker_priority' needs a RabbitmqBroker created with max_priority, and "
            f"actor {actor.actor_name!r}'s broker has none: drop it, or set max_priority"
        )
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= highest:
        raise ConfigurationError(
            f"option 'broker_priority' is {priority!r}: give a whole number from 0 to {highest}"
        )
