"""A job's coming runs, from the definition its schedulers registered: what ``relay next`` shows.

Each is a slot of the job's schedule with its jitter delay added, in UTC and in the job's time
zone, flagged when the job is paused (its slots are then recorded skipped until it is resumed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from relay.errors import ConfigurationError
from relay.jobs import jitter_delay
from relay.runs import run_id
from relay.schedules import make_schedule

__all__ = ["HORIZON", "MAX_NEXT_RUNS", "NextRun", "next_runs"]

MAX_NEXT_RUNS = 1000
"""The most runs one look ahead returns."""
HORIZON = timedelta(days=400)
"""How far ahead slots are looked for; a schedule may have fewer in it (a yearly job, a date)."""


@dataclass(frozen=True)
class NextRun:
    """One coming run of a job."""

    id: str
    """Its run id: the job and the slot, in UTC."""
    slot: datetime
    """The slot (UTC) that names the run."""
    starts_at: datetime
    """When an instance starts it (UTC): the slot plus the job's jitter delay."""
    local: datetime
    """``starts_at`` in the job's time zone (UTC for an ``every=`` job)."""
    paused: bool
    """The job is paused: this run is recorded skipped unless the job is resumed before."""


def next_runs(
    job: str, spec: dict[str, Any], now: datetime, count: int, *, paused: bool = False
) -> list[NextRun]:
    """The first ``count`` runs of ``job`` that start after ``now``, from its registered ``spec``
    (:func:`relay.jobs.job_spec`), within :data:`HORIZON`."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NEXT_RUNS:
        raise ConfigurationError(
            f"count={count!r}: ask for 1 to {MAX_NEXT_RUNS} coming runs (--count)"
        )
    if "cron" not in spec and "every" not in spec:
        raise ConfigurationError(
            f"job {job!r} has no registered schedule: run a scheduler of this Relay version for "
            "it once, so the store learns its schedule"
        )
    schedule = make_schedule(
        cron=spec.get("cron"), every=spec.get("every"), tz=spec.get("tz"), job=job
    )
    zone = _zone(spec.get("tz"))
    jitter = float(spec.get("jitter") or 0)
    found: list[NextRun] = []
    # A jittered slot up to `jitter` before now may still start after it.
    for slot in schedule.slots_between(now - timedelta(seconds=jitter), now + HORIZON):
        starts = slot + timedelta(seconds=jitter_delay(job, slot, jitter))
        if starts <= now:
            continue
        found.append(NextRun(run_id(job, slot), slot, starts, starts.astimezone(zone), paused))
        if len(found) == count:
            break
    return found


def _zone(name: object) -> tzinfo:
    try:
        return ZoneInfo(str(name or "UTC"))
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")
