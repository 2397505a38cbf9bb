"""``@periodic``: turn a Dramatiq actor into a periodic job, validated when it is declared."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any, Literal, TypeVar

import dramatiq
from dramatiq.middleware import AsyncIO

from relay.durations import Duration
from relay.engine.coroutines import is_coroutine_function
from relay.errors import ConfigurationError
from relay.jobs import Job, Overlap, make_job
from relay.retries import foreign_retries
from relay_dramatiq._consumer import caller, check_actor
from relay_dramatiq._middleware import RelayMiddleware

__all__ = [
    "Periodic", "check_coroutine", "check_retries", "middleware_of", "periodic", "periodic_actors",
    "require_worker_side",
]  # fmt: skip

A = TypeVar("A", bound="dramatiq.Actor[Any, Any]")


@dataclass(frozen=True)
class Periodic:
    """A periodic actor: the actor, its job, and the middleware whose backend decides its runs."""

    actor: dramatiq.Actor[Any, Any]
    job: Job
    middleware: RelayMiddleware[Any]


_registry: dict[dramatiq.Actor[Any, Any], Periodic] = {}


def periodic_actors() -> list[Periodic]:
    """Every periodic actor declared in this process, in declaration order."""
    return list(_registry.values())


def periodic(
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | tzinfo | None = None,
    overlap: Overlap | None = None,
    max_attempts: int | None = None,
    catch_up: Duration | None = None,
    stale_after: Duration | None = None,
    jitter: Duration | None = None,
    expect_success_within: Duration | Literal[False] | None = None,
    alert_after_failures: int | None = None,
) -> Callable[[A], A]:
    """Run the decorated actor on a schedule; put it above ``@dramatiq.actor``.

    The backend is the one of the :class:`RelayMiddleware` on the actor's broker, so add the
    middleware where the broker is created, before declaring actors: an actor declared before it
    is refused, since workers importing only the actor's module would run its runs unleased.
    Options are checked here, once, against that backend: ``overlap`` (``"allow"``, ``"skip"`` or
    ``"buffer_one"``), ``max_attempts`` and ``catch_up`` raise ``UnsupportedOption`` on a claim
    backend; ``jitter`` delays each slot by a fixed hash of ``(actor, slot)`` in ``[0, jitter)``
    seconds; ``expect_success_within`` and ``alert_after_failures`` say when the job is overdue
    or failing (:mod:`relay.expectations`). The actor must take no required arguments (run
    messages carry none); it reads its run with :func:`relay_dramatiq.current_run`. Relay owns
    retries (``max_attempts``), so the actor must not set Dramatiq's ``retry_when`` nor a
    ``max_retries`` other than 0. An ``async def``
    actor needs Dramatiq's ``AsyncIO`` middleware on its broker (workers run it on its loop).
    """

    def register(actor: A) -> A:
        if not isinstance(actor, dramatiq.Actor):
            raise TypeError("@periodic goes above @dramatiq.actor, on an actor")
        middleware = middleware_of(actor)
        _check_arguments(actor)
        check_retries(actor)
        check_actor(middleware.backend, actor)
        check_coroutine(actor)
        if actor in _registry:
            raise ConfigurationError(f"actor {actor.actor_name!r} is already periodic")
        job = make_job(
            middleware.backend,
            name=actor.actor_name,
            cron=cron,
            every=every,
            tz=tz,
            overlap=overlap,
            max_attempts=max_attempts,
            catch_up=catch_up,
            stale_after=stale_after,
            jitter=jitter,
            expect_success_within=expect_success_within,
            alert_after_failures=alert_after_failures,
        )
        _registry[actor] = Periodic(actor, job, middleware)
        middleware.consumer_jobs.append(dataclasses.replace(job, handler=caller(actor)))
        return actor

    return register


def middleware_of(actor: dramatiq.Actor[Any, Any], kind: str = "periodic") -> RelayMiddleware[Any]:
    """The :class:`RelayMiddleware` on the actor's broker, there since before the actor was
    declared; ``kind`` (``"periodic"``, ``"schedulable"``) names the actor in errors."""
    found = [m for m in actor.broker.middleware if isinstance(m, RelayMiddleware)]
    if not found:
        raise ConfigurationError(
            f"actor {actor.actor_name!r} is {kind}, but its broker has no RelayMiddleware: "
            "call broker.add_middleware(relay_dramatiq.RelayMiddleware(backend=...)) "
            f"before declaring {kind} actors"
        )
    require_worker_side(actor, found[0], kind)
    return found[0]


def require_worker_side(
    actor: dramatiq.Actor[Any, Any], middleware: RelayMiddleware[Any], kind: str = "periodic"
) -> None:
    """Refuse a periodic (or schedulable) actor that workers could load without ``middleware``.

    The middleware must be on the actor's broker, and have been there when the actor was
    declared: then every module that declares the actor also sets up Relay's worker side.
    """
    if middleware not in actor.broker.middleware:
        raise ConfigurationError(
            f"{kind} actor {actor.actor_name!r} is decided on a RelayMiddleware that is not on "
            "its broker, so workers would run its runs unleased: call "
            "broker.add_middleware(relay_dramatiq.RelayMiddleware(backend=...)) on the broker "
            "the actor is declared on"
        )
    if actor.actor_name not in middleware.declared:
        raise ConfigurationError(
            f"actor {actor.actor_name!r} was declared before the RelayMiddleware was added to "
            "its broker, so workers that import the actor's module without this one would run "
            "its runs unleased, each again and again: call "
            "broker.add_middleware(relay_dramatiq.RelayMiddleware(backend=...)) where the broker "
            "is created, before declaring actors"
        )


def _check_arguments(actor: dramatiq.Actor[Any, Any]) -> None:
    required = [
        p.name
        for p in inspect.signature(actor.fn).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise ConfigurationError(
            f"periodic actor {actor.actor_name!r} takes required argument(s) "
            f"{', '.join(required)}, but run messages carry none: give them defaults, "
            "and read the run with relay_dramatiq.current_run()"
        )


def check_coroutine(actor: dramatiq.Actor[Any, Any], kind: str = "periodic") -> None:
    """Refuse an ``async def`` actor that Dramatiq's workers could not run: no AsyncIO loop."""
    if not is_coroutine_function(inspect.unwrap(actor.fn)):
        return
    if any(isinstance(m, AsyncIO) for m in actor.broker.middleware):
        return
    raise ConfigurationError(
        f"{kind} actor {actor.actor_name!r} is async def, but its broker has no AsyncIO "
        "middleware, so workers could not run it and every attempt would fail: call "
        "broker.add_middleware(dramatiq.middleware.AsyncIO()) where the broker is created, "
        "or make the actor a plain def"
    )


def check_retries(
    actor: dramatiq.Actor[Any, Any], kind: str = "periodic", where: str = "in @periodic"
) -> None:
    """Refuse an actor that retries on its own: Relay retries a failed run, with a new token."""
    if actor.options.get("retry_when") is not None or actor.options.get("max_retries", 0) != 0:
        raise foreign_retries(
            f"{kind} actor {actor.actor_name!r}",
            "max_retries / retry_when",
            f"{where}(max_attempts=...)",
        )
