"""Sentry cron check-ins from Relay's hooks: each job is a Sentry cron monitor.

Every attempt of a run sends ``in_progress`` when it starts, then ``ok`` or ``error`` with its
duration; a run whose last attempt died without finishing sends ``error``. The monitor's slug is the
job's name. ``pip install 'relay-scheduler' sentry-sdk``, then, where the code that *runs* the
jobs is set up::

    import sentry_sdk
    sentry_sdk.init(dsn="https://…@….ingest.sentry.io/…")

    send_checkins(scheduler.on)       # the standalone relay.Scheduler
    send_checkins(relay_celery.on)    # Celery: the hooks fire in the worker (and beat, for
                                      # "exhausted"), so put this where the app is defined
    send_checkins(middleware.on)      # Dramatiq: the RelayMiddleware on the broker

Each check-in id is derived from the run and its token, so the ``in_progress`` and final check-ins
of one attempt match even when they are sent from different threads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sentry_sdk.crons import MonitorStatus, capture_checkin

from relay.events import RunEvent, RunExhausted, RunFailed, RunStarted, RunSucceeded

__all__ = ["send_checkins"]

On = Callable[[type[Any], Callable[[Any], object]], Callable[[], None]]
"""``scheduler.on``, ``relay_celery.on`` or ``RelayMiddleware.on``."""


def checkin_id(event: RunEvent) -> str:
    """One check-in id per attempt: the same for its start and its end, in any process."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"relay:{event.run_id}#{event.token}").hex


def started(event: RunStarted) -> None:
    capture_checkin(
        monitor_slug=event.job, check_in_id=checkin_id(event), status=MonitorStatus.IN_PROGRESS
    )


def succeeded(event: RunSucceeded) -> None:
    capture_checkin(
        monitor_slug=event.job,
        check_in_id=checkin_id(event),
        status=MonitorStatus.OK,
        duration=event.duration,
    )


def failed(event: RunFailed) -> None:
    capture_checkin(
        monitor_slug=event.job,
        check_in_id=checkin_id(event),
        status=MonitorStatus.ERROR,
        duration=event.duration,
    )


def exhausted(event: RunExhausted) -> None:
    capture_checkin(monitor_slug=event.job, status=MonitorStatus.ERROR)


def send_checkins(on: On) -> Callable[[], None]:
    """Subscribe the check-ins with ``on``; returns a function that unsubscribes them all."""
    offs = [
        on(RunStarted, started),
        on(RunSucceeded, succeeded),
        on(RunFailed, failed),
        on(RunExhausted, exhausted),
    ]

    def off() -> None:
        for unsubscribe in offs:
            unsubscribe()

    return off
