"""External monitors that notice absence: each job registered with a monitoring service, with
its schedule and grace, and a check-in when each run starts and ends. The service alerts when no
check-in comes in time, so it still alerts when every instance is down.

* :mod:`relay.monitors.healthchecks`: Healthchecks.io (or a self-hosted Healthchecks), through its
  management and ping APIs; no dependency.
* :mod:`relay.monitors.sentry`: Sentry Crons, through ``sentry-sdk`` (``pip install
  'relay-scheduler[sentry]'``).

Both subscribe to the engine's events (``scheduler.on``, ``relay_celery.on``,
``RelayMiddleware.on``) where the runs run. :func:`plan` is what both tell the service.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from relay import clock
from relay.expectations import GRACE_FRACTION, MIN_GRACE, next_slot
from relay.jobs import Job
from relay.schedules import BoundedSchedule, CronSchedule, EverySchedule, Schedule

__all__ = ["MonitorPlan", "plan"]


@dataclass(frozen=True)
class MonitorPlan:
    """What a monitoring service is told of one job."""

    job: str
    cron: str | None
    """The cron expression (with ``tz``), or ``None`` for an interval."""
    tz: str | None
    every: float | None
    """Seconds between slots, for a job with no cron expression."""
    grace: float
    """Seconds a check-in may come late (and a run may last) before the service alerts."""


def plan(job: Job) -> MonitorPlan:
    """The schedule and grace of ``job`` as a monitor sees them.

    The grace is the job's ``expect_success_within`` when it gives one; else the grace of the
    default expectation (:mod:`relay.expectations`): a tenth of the interval, at least a minute,
    plus the job's jitter. A service alerts per late check-in, so it gets the grace alone.
    """
    schedule: Schedule = job.schedule
    if isinstance(schedule, BoundedSchedule):
        schedule = schedule.inner
    cron = tz = None
    every: float | None = None
    if isinstance(schedule, CronSchedule):
        cron, tz = schedule.expression, str(schedule.tz)
    elif isinstance(schedule, EverySchedule):
        every = schedule.interval
    within = job.expect_success_within
    if isinstance(within, float | int) and within is not False:
        grace = float(within)
    else:
        grace = max(MIN_GRACE, _interval(schedule) * GRACE_FRACTION) + job.jitter
    return MonitorPlan(job.name, cron, tz, every, math.ceil(grace))


def _interval(schedule: Schedule) -> float:
    now = datetime.fromtimestamp(clock.time(), timezone.utc)
    first = next_slot(schedule, now)
    second = None if first is None else next_slot(schedule, first)
    if first is None or second is None:
        return 0.0
    return (second - first).total_seconds()
