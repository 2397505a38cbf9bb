"""After a move from the stock ``celery beat``: the same ``beat_schedule``, decided through Relay.

Before, one ``celery -A celery_beat beat`` ran, with its state in a local ``celerybeat-schedule``
file. After, any number run (``celery -A celery_beat beat``, several times, on several hosts) and
every run is published by exactly one of them. Two settings changed; the schedule did not: Relay's
options for its entries live beside it, in ``relay_jobs``, which the stock scheduler ignores, so a
rollback is one setting. See docs/migrate/celery-beat.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

import relay_celery

app = Celery("celery_beat", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.timezone = "Europe/Paris"
app.conf.beat_schedule = {
    "nightly-report": {
        "task": "reports.build",
        "schedule": crontab(minute=30, hour=2),  # 02:30 Paris time, DST included
        "args": ("daily",),
    },
    "poll-payments": {
        "task": "payments.poll",
        "schedule": timedelta(seconds=30),
    },
}
# New, and optional: Relay's options per entry (the stock beat ignores this setting).
app.conf.relay_jobs = {
    "nightly-report": {"max_attempts": 3, "catch_up": 6 * 3600},  # retry, and catch up
    "poll-payments": {"overlap": "skip"},  # never two polls at once
}
# The two lines of the migration: beat decides through Relay, on a store every beat shares.
app.conf.beat_scheduler = "relay_celery.RelayScheduler"
app.conf.relay_backend = os.environ.get("RELAY_BACKEND", "postgresql://relay@db:5432/app")
relay_celery.install(app)  # workers start, heartbeat and finish each run
