"""A Django project for the tests of ``relay.contrib.django``; each test sets it up from the
environment: ``RELAY_T_DB`` (the database: a SQLite path, or a PostgreSQL URL) and
``RELAY_T_SETTINGS`` (JSON: settings to add, such as ``RELAY`` or ``CELERY_RELAY_LEASE``)."""

import json
import os
from urllib.parse import parse_qs, urlsplit

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "tests.django_app.site.urls"
STATIC_URL = "/static/"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "relay.contrib.django",
    "tests.django_app.site.jobs",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
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


def _database(value: str) -> dict[str, object]:
    if not value.startswith("postgres"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": value}
    parts = urlsplit(value)
    options = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "",
        "PORT": parts.port or "",
        "OPTIONS": options,
    }


DATABASES = {"default": _database(os.environ.get("RELAY_T_DB", "db.sqlite3"))}
globals().update(json.loads(os.environ.get("RELAY_T_SETTINGS", "{}")))
