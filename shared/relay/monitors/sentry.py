"""Sentry Crons for Relay's jobs: each job a cron monitor, created with its schedule and grace,
and a check-in per attempt.

::

    import sentry_sdk
    from relay.monitors.sentry import send_checkins

    sentry_sdk.init(dsn="https://…@….ingest.sentry.io/…")
    send_checkins(scheduler.on, scheduler.jobs.values())   # where the runs run

Every attempt sends ``in_progress`` when it starts, then ``ok`` or ``error`` with its duration; a
run whose last attempt died without finishing sends ``error``. The ``in_progress`` check-in of a
job given in ``jobs`` carries its monitor's configuration (``monitor_config``: its crontab and time
zone or its interval, ``checkin_margin`` and ``max_runtime`` from the grace of
:func:`relay.monitors.plan`), so Sentry creates or updates the monitor, and alerts on its own when
a check-in does not come: whether or not any instance is left. The monitor's slug is the job's
name in lower case, other characters than letters, digits, ``-`` and ``_`` made ``-``.

Each check-in id is derived from the run and its token, so the ``in_progress`` and final
check-ins of one attempt match even when they are sent from different threads or processes.
Needs ``pip install 'relay-scheduler[sentry]'``.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from relay.errors import MissingDependency
from relay.events import RunEvent, RunExhausted, RunFailed, RunStarted, RunSucceeded
from relay.jobs import Job
from relay.monitors import plan

__all__ = ["checkin_id", "monitor_config", "send_checkins", "slug_of"]

On = Callable[[type[Any], Callable[[Any], object]], Callable[[], None]]
"""``scheduler.on``, ``relay_celery.on`` or ``RelayMiddleware.on``."""


def slug_of(job: str) -> str:
    """The monitor slug of ``job``: lower case, ``[a-z0-9_-]``, at most 50 characters."""
    return re.sub(r"[^a-z0-9_-]+", "-", job.lower())[:50] or "relay-job"


def checkin_id(event: RunEvent) -> str:
    """One check-in id per attempt: the same for its start and its end, in any process."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"relay:{event.run_id}#{event.token}").hex


def monitor_config(job: Job) -> dict[str, Any]:
    """The ``monitor_config`` Sentry creates or updates the job's monitor with."""
    seen = plan(job)
    minutes = max(1, math.ceil(seen.grace / 60))
    config: dict[str, Any] = {"checkin_margin": minutes, "max_runtime": minutes}
    if seen.cron is not None:
        config["schedule"] = {"type": "crontab", "value": seen.cron}
        config["timezone"] = seen.tz
    else:
        config["schedule"] = _interval(seen.every or 60)
    return config


def _interval(seconds: float) -> dict[str, Any]:
    for unit, size in (("day", 86400), ("hour", 3600)):
        if seconds >= size and seconds % size == 0:
            return {"type": "interval", "value": int(seconds // size), "unit": unit}
    return {"type": "interval", "value": max(1, round(seconds / 60)), "unit": "minute"}


def send_checkins(on: On, jobs: Iterable[Job] = ()) -> Callable[[], None]:
    """Send the check-ins of every run ``on`` reports; the jobs in ``jobs`` carry their monitor's
    configuration. Returns a function that unsubscribes them all."""
    crons = _crons()
    configs = {job.name: monitor_config(job) for job in jobs}

    def checkin(event: RunEvent, status: str, duration: float | None = None) -> None:
        crons.capture_checkin(
            monitor_slug=slug_of(event.job), check_in_id=checkin_id(event), status=status,
            duration=duration,
            monitor_config=configs.get(event.job) if status == "in_progress" else None,
        )  # fmt: skip

    def exhausted(event: RunExhausted) -> None:
        crons.capture_checkin(
            monitor_slug=slug_of(event.job), status=crons.MonitorStatus.ERROR,
            monitor_config=configs.get(event.job),
        )  # fmt: skip

    status = crons.MonitorStatus
    offs = [
        on(RunStarted, lambda e: checkin(e, status.IN_PROGRESS)),
        on(RunSucceeded, lambda e: checkin(e, status.OK, e.duration)),
        on(RunFailed, lambda e: checkin(e, status.ERROR, e.duration)),
        on(RunExhausted, exhausted),
    ]

    def off() -> None:
        for unsubscribe in offs:
            unsubscribe()

    return off


def _crons() -> Any:
    try:
        import sentry_sdk.crons
    except ImportError as exc:
        raise MissingDependency("sentry-sdk", "sentry", needed_by="relay.monitors.sentry") from exc
    return sentry_sdk.crons
