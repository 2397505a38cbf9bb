"""After a move from celery-redbeat: Relay's leases in the same Redis, and every beat active.

Before: ``beat_scheduler = "redbeat.RedBeatScheduler"`` with ``redbeat_redis_url`` and a lock that
let one beat work while the others waited. After: the same Redis holds Relay's per-run leases
(``?prefix=`` plays the part of ``redbeat_key_prefix``), every beat decides, and each run is
published by the beat that wins it. See docs/migrate/redbeat.md.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

import relay_celery

REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

app = Celery("redbeat_app", broker=REDIS)
app.conf.update(
    beat_scheduler="relay_celery.RelayScheduler",  # was "redbeat.RedBeatScheduler"
    relay_backend=os.environ.get("RELAY_BACKEND", f"{REDIS}?prefix=relay:"),  # redbeat_redis_url
    relay_lease=30,  # a running task's lease (redbeat_lock_timeout was the whole beat's lock)
    relay_heartbeat=10,
    beat_schedule={
        "sync-crm": {
            "task": "crm.sync",
            "schedule": crontab(minute="*/15"),
        },
        "expire-sessions": {"task": "auth.expire_sessions", "schedule": 60.0},
    },
    relay_jobs={"sync-crm": {"overlap": "skip", "max_attempts": 2}},  # Relay's options per entry
)
relay_celery.install(app)
