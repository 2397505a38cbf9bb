"""Settings of the example project: just enough Django for Celery and Relay."""

import os
from datetime import timedelta
from pathlib import Path

from celery.schedules import crontab

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
INSTALLED_APPS = ["reports"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
USE_TZ = True
TIME_ZONE = "Europe/Paris"

# Celery reads every CELERY_* setting (namespace="CELERY" in project/celery.py).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_TIMEZONE = TIME_ZONE
# relay_celery.install(app) chooses RelayScheduler when this is unset; naming it keeps the choice
# visible, and "celery.beat:PersistentScheduler" here is the whole way back to Celery's own beat.
CELERY_BEAT_SCHEDULER = "relay_celery.RelayScheduler"
CELERY_BEAT_SCHEDULE = {
    "daily-digest": {
        "task": "reports.tasks.send_digest",
        "schedule": crontab(minute=0, hour=7),  # 07:00 Paris time, DST included
    },
    "refresh-cache": {
        "task": "reports.tasks.refresh_cache",
        "schedule": timedelta(seconds=15),
    },
}
# Relay's options per beat_schedule entry, apart, so Celery's stock beat loads the schedule too.
CELERY_RELAY_JOBS = {
    "daily-digest": {"max_attempts": 3, "catch_up": 6 * 3600, "stale_after": 12 * 3600},
    "refresh-cache": {"overlap": "skip"},
}

# Relay's own settings; CELERY_RELAY_BACKEND etc. work too and take precedence.
RELAY = {
    "BACKEND": os.environ.get("RELAY_BACKEND", f"sqlite:///{BASE_DIR / 'relay.db'}"),
    "LEASE": 30,  # a running task's lease, renewed every HEARTBEAT seconds
    "HEARTBEAT": 10,
    "QUEUE_LEASE": 300,  # how long a published run may wait in the queue
}
