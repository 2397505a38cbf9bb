"""An instance as a lease store records it: the value ``record_instance`` and ``instances`` carry.

The model under the contract (:mod:`relay.contract`) and the stores; the heartbeat that writes it
lives with the hosts' helpers in :mod:`relay.health`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["LATE_AFTER_BEATS", "ROLES", "InstanceInfo", "is_alive", "is_healthy"]

ROLES = ("scheduler", "beat", "worker", "dramatiq-scheduler", "dramatiq-worker")
"""What an instance does: the standalone scheduler, Celery beat, a Celery worker, the Dramatiq
scheduler process, a Dramatiq worker."""
LATE_AFTER_BEATS = 3
"""An instance that missed this many beats counts as dead (unless a probe gives ``max_age``)."""


@dataclass(frozen=True)
class InstanceInfo:
    """One instance as a lease store records it.

    ``beat_at`` and ``expires_at`` are set by the store, on its own clock, when it records a beat;
    they are ``None`` in the value an instance hands to ``record_instance``.
    """

    owner: str
    """The instance's owner name, the one its leases carry (``host:pid:random`` by default)."""
    role: str
    """One of :data:`ROLES`."""
    host: str
    pid: int
    started_at: datetime
    """When the instance started (its own clock, UTC)."""
    version: str
    """The Relay version it runs."""
    interval: float
    """Seconds between its beats: a probe's default ``max_age`` is a few of these."""
    beat_at: datetime | None = None
    """Its last beat, on the store's clock."""
    expires_at: datetime | None = None
    """When the store forgets it unless it beats again, on the store's clock."""
    tasks: tuple[str, ...] = ()
    """The tasks it allows stored schedules to run (``@scheduler.task("name")``), by name."""
    problem: str | None = None
    """Why the instance is not working although it beats: its ticks have failed for longer than
    a lease, or its store needs a newer Relay (``None``: working). ``relay health`` counts it
    unhealthy whatever its last beat; Relay 0.1 neither writes nor reads it."""


def is_alive(info: InstanceInfo, now: datetime, max_age: float | None = None) -> bool:
    """Whether ``info`` beat within ``max_age`` seconds of ``now`` (the store's clock).

    ``max_age`` defaults to :data:`LATE_AFTER_BEATS` of the instance's own interval.
    """
    if info.beat_at is None:
        return False
    limit = LATE_AFTER_BEATS * info.interval if max_age is None else max_age
    return (now - info.beat_at).total_seconds() <= limit


def is_healthy(info: InstanceInfo, now: datetime, max_age: float | None = None) -> bool:
    """Whether ``info`` is alive (:func:`is_alive`) and working: it recorded no ``problem``."""
    return info.problem is None and is_alive(info, now, max_age)
