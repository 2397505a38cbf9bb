"""Settings of the example project: Django's admin, Relay's app, and Celery or Dramatiq."""

import os
from pathlib import Path

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

# -- Celery (project/celery.py) and Dramatiq (project/dramatiq.py) -------------------------------
# Both use Redis; NAMESPACE keeps this example's queues and keys apart on a shared server.
BROKER_URL = os.environ.get("EXAMPLE_BROKER_URL", "redis://127.0.0.1:6379/0")
NAMESPACE = os.environ.get("EXAMPLE_NAMESPACE", "relay_django_example")
