"""``RELAY = {"BACKEND": "django"}``: Relay's own backend and schema in the project's database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from relay import AcquireRequest, open_backend
from tests.django_app.support import manage, site_env
from tests.support.backends import unique
from tests.support.procs import ROOT
from tests.support.services import SERVICES

URLS = """
import json, sys
from django.conf import settings
settings.configure()
from relay.contrib.django.database import backend_url
from relay.errors import RelayError
out = []
for databases, value in json.loads(sys.argv[1]):
    settings.DATABASES = databases
    try:
        out.append(backend_url(value))
    except RelayError as exc:
        out.append(f"{type(exc).__name__}: {exc}")
print(json.dumps(out))
"""


def urls(*cases: tuple[dict[str, object], str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", URLS, json.dumps(cases)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    found: list[str] = json.loads(done.stdout)
    return found


def pg(**fields: object) -> dict[str, object]:
    return {"default": {"ENGINE": "django.db.backends.postgresql", **fields}}


def test_urls_built_from_django_databases(tmp_path: Path) -> None:
    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "rel/db.sqlite3"}}
    memory = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    full = pg(NAME="app", USER="me", PASSWORD="p@ss/w:rd", HOST="db.example", PORT=6432,
              OPTIONS={"sslmode": "require", "isolation_level": 4})  # fmt: skip
    assert urls(
        (sqlite, "django"),
        (memory, "django"),
        (full, "django"),
        (pg(NAME="app", HOST="/var/run/postgresql"), "django"),
        (pg(NAME="app", USER="me"), "django://default?schema=jobs"),
        (pg(NAME="app"), "django://other"),
        ({"default": {"ENGINE": "django.db.backends.mysql", "NAME": "x"}}, "django"),
        (
            pg(NAME="app", HOST="a,b", PORT="5441,5442", OPTIONS={"target_session_attrs": "any"}),
            "django",
        ),
        (pg(NAME="app", HOST="a,::1", PORT=5432), "django"),
        (pg(NAME="app", HOST="a,b,c", PORT="1,2"), "django"),
    ) == [
        f"sqlite:///{ROOT / 'rel' / 'db.sqlite3'}",
        "ConfigurationError: DATABASES['default'] is an in-memory SQLite database: processes "
        "cannot share it; give it a file NAME, or set RELAY['BACKEND'] to "
        "'sqlite:////path/to/relay.db'",
        "postgresql://me:p%40ss%2Fw%3Ard@db.example:6432/app?sslmode=require",
        "postgresql:///app?host=%2Fvar%2Frun%2Fpostgresql",
        "postgresql://me@/app?schema=jobs",
        "ConfigurationError: settings.RELAY['BACKEND'] is 'django://other' but DATABASES has no "
        "'other' entry; known: default",
        "ConfigurationError: settings.RELAY['BACKEND'] = 'django' needs DATABASES['default'] on "
        "PostgreSQL or SQLite, not django.db.backends.mysql; set RELAY['BACKEND'] to a backend "
        "URL instead, such as 'redis://localhost:6379/0'",
        "postgresql://a:5441,b:5442/app?target_session_attrs=any",
        "postgresql://a:5432,[::1]:5432/app",
        "ConfigurationError: DATABASES HOST 'a,b,c' names 3 hosts but PORT '1,2' gives 2 ports; "
        "give one port for all hosts, or one per host",
    ]


def test_relay_shares_the_projects_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    env = site_env(db, RELAY={"BACKEND": "django"})
    assert manage(env, "migrate", "-v", "0").returncode == 0
    store = open_backend(f"sqlite:///{db}")  # what a scheduler of the project opens
    won = store.acquire(AcquireRequest("nightly", store.now().replace(microsecond=0), "a:1", 30))
    assert won.run is not None
    store.close()
    listed = manage(env, "relay_runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [won.run.id]
    tables = manage(env, "shell", "-c", "from django.db import connection; "
                    "print(sorted(connection.introspection.table_names()))").stdout  # fmt: skip
    assert "relay_runs" in tables and "auth_user" in tables


@pytest.mark.postgres
def test_relay_uses_its_own_schema_in_the_projects_postgresql_database(tmp_path: Path) -> None:
    base, schema = SERVICES["postgres"].url, unique()
    env = site_env(base, RELAY={"BACKEND": f"django://default?schema={schema}"})
    try:
        store = open_backend(f"{base}{'&' if '?' in base else '?'}schema={schema}")
        won = store.acquire(AcquireRequest("nightly", store.now().replace(microsecond=0), "a", 30))
        assert won.run is not None
        store.close()
        listed = manage(env, "relay_runs", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [r["id"] for r in json.loads(listed.stdout)] == [won.run.id]
        assert manage(env, "check").returncode == 0
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


CELERY = """
import os, sys
from django.conf import settings
db = {"ENGINE": "django.db.backends.sqlite3", "NAME": sys.argv[1]}
settings.configure(RELAY={"BACKEND": "django", "LEASE": 20}, DATABASES={"default": db})
from celery import Celery
from relay_celery.config import load_settings
from relay_dramatiq.django import RelayMiddleware
print(load_settings(Celery("t")).backend)
print(RelayMiddleware().backend.name)
"""


def test_celery_and_dramatiq_read_the_django_backend_too(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    done = subprocess.run(
        [sys.executable, "-c", CELERY, str(db)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"sqlite:///{db}", f"SQLite ({db})"]
