"""Jobs: the definition of a periodic task, validated once when it is created."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any, Literal

from relay.contract import ClaimBackend, LeaseBackend
from relay.durations import Duration, non_negative_seconds, optional_seconds
from relay.errors import ConfigurationError, UnsupportedOption
from relay.schedules import Schedule, make_schedule

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "LEASE_BACKENDS",
    "TICK_SPREAD",
    "Job",
    "Overlap",
    "check_scheduler_options",
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


@dataclass(frozen=True)
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
    if not isinstance(name, str) or not name or "@" in name:
        raise ConfigurationError(f"job name {name!r} must be a non-empty string without '@'")
    schedule = make_schedule(cron=cron, every=every, tz=tz)
    if backend.capability == "claim":
        # A claim backend may honour some of them its own way (RabbitMQ consumer mode:
        # max_attempts as its run queue's delivery limit); it lists them in ``job_options``.
        honoured: frozenset[str] = getattr(backend, "job_options", frozenset())
        lease_only = {"overlap": overlap, "max_attempts": max_attempts, "catch_up": catch_up}
        for option, value in lease_only.items():
            if value is not None and option not in honoured:
                raise UnsupportedOption(option, backend.name, LEASE_BACKENDS)
        _check_claim_memory(backend, optional_seconds(stale_after, "stale_after"))
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
        stale_after=optional_seconds(stale_after, "stale_after"),
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

    On a claim backend both must be left out. On a lease backend they default to 30 s and 10 s, and
    the heartbeat must be shorter than the lease so a live runner renews before it expires.
    """
    if backend.capability == "claim":
        for option, value in {"lease": lease, "heartbeat": heartbeat}.items():
            if value is not None:
                raise UnsupportedOption(option, backend.name, LEASE_BACKENDS)
        return 0.0, 0.0
    lease_s = optional_seconds(lease, "lease") or 30.0
    heartbeat_s = optional_seconds(heartbeat, "heartbeat") or min(10.0, lease_s / 3)
    if heartbeat_s >= lease_s:
        raise ConfigurationError(
            f"heartbeat ({heartbeat_s:g}s) must be shorter than lease ({lease_s:g}s), "
            "or a live runner loses its lease between two heartbeats: "
            "a third of the lease is a good heartbeat"
        )
    return lease_s, heartbeat_s
