"""Sentry cron check-ins from Relay's hooks: each job is a Sentry cron monitor.

Every attempt of a run sends ``in_progress`` when it starts, then ``ok`` or ``error`` with its
duration; a run whose last attempt died without finishing sends ``error``. The monitor's slug is the
job's name. ``pip install 'relay-scheduler[sentry]'``, then, where the code that *runs* the jobs
is set up::

    import sentry_sdk
    sentry_sdk.init(dsn="https://…@….ingest.sentry.io/…")

    send_checkins(scheduler.on, scheduler.jobs.values())   # the standalone relay.Scheduler
    send_checkins(relay_celery.on)    # Celery: the hooks fire in the worker (and beat, for
                                      # "exhausted"), so put this where the app is defined
    send_checkins(middleware.on)      # Dramatiq: the RelayMiddleware on the broker

Given the jobs, each monitor is created (or updated) with the job's schedule and grace, so Sentry
alerts when a check-in does not come, even with every instance down. Each check-in id is derived
from the run and its token, so the ``in_progress`` and final check-ins of one attempt match even
when they are sent from different threads. The check-ins live in :mod:`relay.monitors.sentry`;
this example shows where to call them.
"""

from __future__ import annotations

from relay.monitors.sentry import checkin_id, send_checkins

__all__ = ["checkin_id", "send_checkins"]
