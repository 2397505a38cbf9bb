"""Each migration guide's "after" configuration builds, against the real store it names.

Each example is run in a fresh interpreter by ``tests/support/run_doc_block.py``, which builds
Relay's beat scheduler for a Celery app (every ``beat_schedule`` entry must become a job) and lists
the periodic Dramatiq actors, each with its schedule and options as Relay understood them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import services
from tests.support.backends import postgres_lease, redis_lease
from tests.support.doc_blocks import ROOT, run_checked

MIGRATE = ROOT / "examples" / "migrate"


def check(script: Path, cwd: Path, env: dict[str, str], expected: list[str]) -> None:
    done = run_checked(script, cwd, env=env)
    assert done.returncode == 0, done.stderr
    for line in expected:
        assert line in done.stdout, f"{line!r} not in:\n{done.stdout}"


@pytest.mark.postgres
def test_stock_celery_beat_after_runs_on_postgresql(tmp_path: Path) -> None:
    with postgres_lease(tmp_path) as url:
        check(
            MIGRATE / "celery_beat.py",
            tmp_path,
            {"RELAY_BACKEND": url},
            [
                "celery app celery_beat on postgresql://",
                "job nightly-report: cron '30 2 * * *' (Europe/Paris), overlap=allow "
                "max_attempts=3 catch_up=21600.0",
                "job poll-payments: every 30s, overlap=skip",
            ],
        )


@pytest.mark.redis
def test_redbeat_after_keeps_its_leases_in_redis(tmp_path: Path) -> None:
    with redis_lease(tmp_path) as url:
        check(
            MIGRATE / "redbeat.py",
            tmp_path,
            {"REDIS_URL": services.SERVICES["redis"].url, "RELAY_BACKEND": url},
            [
                f"celery app redbeat_app on {url}",
                "job sync-crm: cron '0,15,30,45 * * * *' (UTC), overlap=skip max_attempts=2",
                "job expire-sessions: every 60s",
            ],
        )


@pytest.mark.redis
def test_periodiq_and_dramatiq_crontab_after_declare_periodic_actors(tmp_path: Path) -> None:
    with redis_lease(tmp_path) as url:
        check(
            MIGRATE / "dramatiq_schedulers.py",
            tmp_path,
            {"REDIS_URL": services.SERVICES["redis"].url, "RELAY_BACKEND": url},
            [
                "job hourly: cron '0 * * * *' (UTC), overlap=allow max_attempts=3 catch_up=0.0 "
                "stale_after=30.0",
                "job every_five_minutes: cron '*/5 * * * *' (Europe/Paris)",
                "job every_thirty_seconds: every 30s, overlap=skip",
            ],
        )


@pytest.mark.postgres
def test_django_celery_beat_after_is_the_django_example_with_code_defined_schedules(
    tmp_path: Path,
) -> None:
    project = ROOT / "examples" / "django_project"
    with postgres_lease(tmp_path) as url:
        check(
            project / "project" / "celery.py",
            tmp_path,
            {"PYTHONPATH": str(project), "RELAY_BACKEND": url},
            [
                "celery app project on postgresql://",
                "job daily-digest: cron '0 7 * * *' (Europe/Paris), overlap=allow max_attempts=3 "
                "catch_up=21600.0 stale_after=43200.0",
                "job refresh-cache: every 15s, overlap=skip",
            ],
        )


def test_the_tutorial_app_builds_its_beat(tmp_path: Path) -> None:
    check(
        ROOT / "examples" / "celery_app" / "app.py",
        tmp_path,
        {"RELAY_BACKEND": f"sqlite:///{tmp_path / 'relay.db'}"},
        [
            "job heartbeat-every-10s: every 10s",
            "job cleanup-every-minute: cron '* * * * *' (UTC), overlap=skip max_attempts=3",
        ],
    )
