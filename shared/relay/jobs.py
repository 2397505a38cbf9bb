"""Jobs: the definition of a periodic task, validated once when it is created."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import PurePath
from typing import Any, Literal

from relay.contract import ClaimBackend, LeaseBackend
from relay.durations import (
    MIN_HEARTBEAT,
    MIN_LEASE,
    MIN_TICK,
    Duration,
    at_least,
    non_negative_seconds,
)
from relay.errors import ConfigurationError, UnsupportedOption
from relay.schedules import Schedule, make_schedule

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "LEASE_BACKENDS",
    "TICK_SPREAD",
    "Job",
    "Overlap",
    "check_handler",
    "check_instance_options",
    "check_scheduler_options",
    "check_tick",
    "make_job",
]

Overlap = Literal["allow", "skip"]
TICK_SPREAD = 5.0
"""Seconds that instances' ticks may lag one another; a claim's memory must cover it."""
DEFAULT_MAX_ATTEMPTS = 3
"""Attempts a run gets by default: a failure and a dead runner each use one."""

LEASE_BACKENDS = (
    "sqlite:///…",
    "postgresql://…",
    "redis://… (strategy=lease)",
    "nats://… (strategy=kv)",
)
"""URL forms of the lease backends, for messages that point users to them."""


@dataclass(frozen=True, slots=True)  # 100,000 jobs: no __dict__ each
class Job:
    """A periodic task: its name, its schedule, and what a lease backend should enforce for it.

    ``handler`` is the function the standalone scheduler calls; integrations keep their own task
    or actor and leave it ``None``.
    """

    name: str
    schedule: Schedule
    handler: Callable[..., Any] | None = None
    overlap: Overlap = "allow"
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    catch_up: float = 0.0
    stale_after: float | None = None


def make_job(
    backend: ClaimBackend | LeaseBackend,
    *,
    name: str,
    handler: Callable[..., Any] | None = None,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | tzinfo | None = None,
    overlap: Overlap | None = None,
    max_attempts: int | None = None,
    catch_up: Duration | None = None,
    stale_after: Duration | None = None,
) -> Job:
    """Validate a job's options against its backend and build it.

    Options left ``None`` take their defaults. On a claim backend, ``overlap``, ``max_attempts`` and
    ``catch_up`` raise :class:`UnsupportedOption`: only a lease can honour them.
    """
    if not isinstance(name, str) or not name or "@" in name or not name.isprintable():
        raise ConfigurationError(
            f"job name {name!r} must be a non-empty string without '@' or control characters"
        )
    schedule = make_schedule(cron=cron, every=every, tz=tz, job=name)
    stale = (
        None
        if stale_after is None
        else at_least(stale_after, "stale_after", TICK_SPREAD, _SHORT_STALE_AFTER)
    )
    if backend.capability == "claim":
        lease_only = {"overlap": overlap, "max_attempts": max_attempts, "catch_up": catch_up}
        for option, value in lease_only.items():
            if value is not None:
                raise UnsupportedOption(option, backend.name, LEASE_BACKENDS)
        _check_claim_memory(backend, stale)
    if overlap not in (None, "allow", "skip"):
        raise ConfigurationError(f"overlap={overlap!r} is not known: use 'allow' or 'skip'")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise ConfigurationError(f"max_attempts={max_attempts!r} must be a whole number >= 1")
    return Job(
        name=name,
        schedule=schedule,
        handler=handler,
        overlap=overlap or "allow",
        max_attempts=max_attempts or DEFAULT_MAX_ATTEMPTS,
        catch_up=non_negative_seconds(catch_up or 0, "catch_up"),
        stale_after=stale,
    )


def _check_claim_memory(backend: ClaimBackend, stale_after: float | None) -> None:
    """Refuse a ``stale_after`` the backend forgets claims before: a run could be won twice."""
    memory = backend.remembers_for
    if memory is None or stale_after is None or stale_after + TICK_SPREAD <= memory:
        return
    raise ConfigurationError(
        f"stale_after={stale_after:g}s is too long for {backend.name}: it remembers a claim for "
        f"{memory:g}s, and a run claimed after that could be won twice. Make the backend remember "
        f"at least {stale_after + TICK_SPREAD:g}s (stale_after plus {TICK_SPREAD:g}s of tick "
        "spread; URL option window=… for NATS, retention=… for Redis and RabbitMQ), "
        "or lower stale_after"
    )


def check_scheduler_options(
    backend: ClaimBackend | LeaseBackend, *, lease: Duration | None, heartbeat: Duration | None
) -> tuple[float, float]:
    """Validate ``lease`` and ``heartbeat`` (seconds) against the backend; return them as floats.

    On a claim backend both must be left out. On a lease backend they default to 30 s and a third
    of the lease (at most 10 s); the lease is at least :data:`~relay.durations.MIN_LEASE` (1 s),
    the heartbeat at least :data:`~relay.durations.MIN_HEARTBEAT` (0.1 s) and shorter than the
    lease, so a live runner renews before it expires. A queue lease (Celery, Dramatiq) must be at
    least the lease, so these floors hold for it too.
    """
    if backend.capability == "claim":
        for option, value in {"lease": lease, "heartbeat": heartbeat}.items():
            if value is not None:
                raise UnsupportedOption(option, backend.name, LEASE_BACKENDS)
        return 0.0, 0.0
    lease_s = 30.0 if lease is None else at_least(lease, "lease", MIN_LEASE, _SHORT_LEASE)
    heartbeat_s = (
        min(10.0, lease_s / 3)
        if heartbeat is None
        else at_least(heartbeat, "heartbeat", MIN_HEARTBEAT, _SHORT_HEARTBEAT)
    )
    if heartbeat_s >= lease_s:
        raise ConfigurationError(
            f"heartbeat ({heartbeat_s:g}s) must be shorter than lease ({lease_s:g}s), "
            "or a live runner loses its lease between two heartbeats: "
            "a third of the lease is a good heartbeat"
        )
    return lease_s, heartbeat_s


def check_tick(tick: Duration | None, default: float = 1.0) -> float:
    """Validate how often an instance looks for due runs (seconds); ``None`` gives ``default``."""
    if tick is None:
        return default
    return at_least(tick, "tick", MIN_TICK, "a faster tick only spends CPU; 1 s is the default")


_SHORT_LEASE = (
    "a lease this short can expire during one slow round trip or pause of a live runner, and "
    "another instance then runs the run again; the default is 30 s"
)
_SHORT_STALE_AFTER = (
    "a run not decided this soon after its slot is recorded stale and never runs, and instances' "
    "ticks may lag one another by this much"
)
_SHORT_HEARTBEAT = (
    "each heartbeat writes to the store for every running run; the default is a third of the lease"
)


def check_instance_options(
    backend: object, owner: object, max_workers: object, clock: object
) -> None:
    """Refuse, with the fix, a standalone scheduler's options that no backend needs to judge."""
    if not isinstance(backend, str) and getattr(backend, "capability", None) not in (
        "claim",
        "lease",
    ):
        hint = ""
        if isinstance(backend, PurePath):
            hint = f" (for this SQLite file: 'sqlite:///{backend}')"
        raise ConfigurationError(
            f"backend {backend!r} is neither a URL nor a backend: pass a URL such as "
            f"'sqlite:///relay.db'{hint}, or an object from relay.open_backend(url)"
        )
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise ConfigurationError(f"owner={owner!r} must be a non-empty string, or None")
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ConfigurationError(
            f"max_workers={max_workers!r} must be a whole number >= 1: how many runs may "
            "execute at once in this instance"
        )
    if not callable(clock):
        raise ConfigurationError(f"clock={clock!r} must be a function returning epoch seconds")


def check_handler(handler: object, name: str | None) -> None:
    """Refuse a handler that cannot be called with the run: each attempt would fail."""
    if not callable(handler):
        raise ConfigurationError(
            f"@scheduler.job(...) decorates a function taking the run, not {handler!r}"
        )
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check
        return
    try:
        signature.bind(None)
    except TypeError:
        label = name or getattr(handler, "__qualname__", repr(handler))
        raise ConfigurationError(
            f"job {label!r}: its function must accept the run as one argument, "
            f"as in def {getattr(handler, '__name__', 'handler')}(run: relay.Run) -> None"
        ) from None
