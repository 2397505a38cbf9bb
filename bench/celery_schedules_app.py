"""The Celery app of ``bench_host_schedules``: ``celery -A bench.celery_schedules_app beat``.

Its Relay store is ``RELAY_B_BACKEND``; it allows the task ``echo`` for stored schedules, and each
stored-schedule change a beat applies appends ``[version, time.time()]`` to ``RELAY_B_LOG``.
Nothing is ever due (the benchmark's schedule runs weekly), so the in-memory broker is enough.
"""

from __future__ import annotations

import os

from celery import Celery

import relay_celery
from bench.applied_log import log_applied
from relay.events import ScheduleApplied

app = Celery("relay_bench_schedules", broker="memory://")
app.conf.update(beat_scheduler="relay_celery.RelayScheduler", beat_max_loop_interval=300)
relay_celery.install(app, backend=os.environ["RELAY_B_BACKEND"])
relay_celery.schedulable("echo", app=app)


relay_celery.on(ScheduleApplied, log_applied)
