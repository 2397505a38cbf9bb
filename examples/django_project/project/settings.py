"""Settings of the example project: Django's admin, Relay's app, and Celery or Dramatiq."""

import os
from datetime import timedelta
from pathlib import Path

from celery.schedules import crontab

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "relay.contrib.django",  # checks, relay_* commands, admin pages for jobs, runs, timeline
    "reports",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DB", BASE_DIR / "db.sqlite3"),
    }
}
USE_TZ = True
TIME_ZONE = "Europe/Paris"

# Relay's own settings. "django": runs are kept in DATABASES["default"] (this project's SQLite
# file; a PostgreSQL database would get a "relay" schema), by Relay's backend, not Django models.
RELAY = {
    "BACKEND": os.environ.get("RELAY_BACKEND", "django"),
    "LEASE": 30,  # a running task's lease, renewed every HEARTBEAT seconds
    "HEARTBEAT": 10,
    "QUEUE_LEASE": 300,  # how long a run sent to the broker may wait in the queue
}

# Celery and Dramatiq (project/dramatiq.py) both use Redis; NAMESPACE keeps this example's queues
# and keys apart on a shared server.
BROKER_URL = os.environ.get("EXAMPLE_BROKER_URL", "redis://127.0.0.1:6379/0")
NAMESPACE = os.environ.get("EXAMPLE_NAMESPACE", "relay_django_example")

# Celery reads every CELERY_* setting (namespace="CELERY" in project/celery.py).
CELERY_BROKER_URL = BROKER_URL
CELERY_TASK_DEFAULT_QUEUE = NAMESPACE
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": f"{NAMESPACE}:"}
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
