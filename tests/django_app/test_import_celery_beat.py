"""``manage.py relay_import_celery_beat``: django-celery-beat's periodic tasks, written through its
own models (``tests/django_app/celery_beat_rows.py``), imported as stored schedules by a real
``manage.py`` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from relay import Control
from relay.errors import StoreNotFound
from tests.django_app.support import manage, site_env
from tests.support.backends import postgres_lease, unique
from tests.support.procs import ROOT
from tests.support.services import require
from tests.support.waiting import wait_until

UTC = timezone.utc
NOT_MAPPED = {
    "bad json": "its args '[1,' are not JSON",
    "first monday": "restricts both the day of the month and the day of the week",
    "past": "its clocked time 2020-01-01T00:00:00+00:00 has passed",
    "sunrise": "solar schedules",
    "tiny": "shorter than a millisecond",
}
"""The rows the import cannot map, and what it says of each."""
MAPPED = ["clash", "done once", "launch", "nightly report", "tick", "two-hourly", "weekdays"]


@contextmanager
def relay_store(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'relay.db'}"
        return
    require("postgres")
    with postgres_lease(tmp_path) as url:
        yield url


def beat_site(tmp_path: Path, url: str) -> dict[str, str]:
    """The test site with django-celery-beat (its tables in SQLite), Relay's store at ``url``,
    and the periodic tasks of ``celery_beat_rows.fill`` written."""
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url})
    env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.site.celery_beat_settings"
    rows(env, "fill")
    return env


def rows(env: dict[str, str], command: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "tests.django_app.celery_beat_rows", command],
        cwd=ROOT, env=env, check=True, timeout=120,
    )  # fmt: skip


def imported(env: dict[str, str], *options: str) -> tuple[dict[str, tuple[str, str]], str]:
    """Run the import; each row's ``(verb, rest of its line)`` by name, and the summary line."""
    done = manage(env, "relay_import_celery_beat", *options)
    assert done.returncode == 0, done.stderr
    *lines, summary = done.stdout.splitlines()
    found = {}
    for line in lines:
        verb, _, rest = line.partition(": ")
        if verb in ("not imported", "updated", "would update"):
            name, _, rest = rest.partition(": ")
        else:
            name, _, rest = rest.partition(" (task ")
        found[name] = (verb, rest)
    return found, summary


def versions(url: str) -> dict[str, tuple[int, int]]:
    """Each stored schedule's version and length of history."""
    with Control(url) as control:
        return {
            s.name: (s.version, len(control.schedule_history(s.name))) for s in control.schedules()
        }


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_import_maps_each_row_lists_the_rest_and_changes_nothing_twice(
    kind: str, tmp_path: Path
) -> None:
    with relay_store(kind, tmp_path) as url:
        env = beat_site(tmp_path, url)
        # A dry run on a store that does not exist yet creates nothing, not even a schema.
        planned, summary = imported(env, "--dry-run", "--force")
        assert (
            summary == "12 periodic tasks: 7 would add, 0 would update, 0 unchanged, 5 not imported"
        )
        assert {n for n, (verb, _) in planned.items() if verb == "would add"} == set(MAPPED)
        with pytest.raises(StoreNotFound):
            Control(url, read_only=True)

        with Control(url) as control:  # a schedule of the same name, defined otherwise
            control.add_schedule("clash", "app.clash", every=60, force=True, by="ann")
        before = versions(url)
        planned, _ = imported(env, "--dry-run")
        assert planned["clash"][0] == "not imported" and "pass --update" in planned["clash"][1]
        assert "no live instance allows task 'app.report'" in planned["nightly report"][1]
        hint = planned["nightly report"][1]  # a Celery user's fix, not the standalone API's
        assert "@relay_celery.schedulable" in hint and "RELAY['SCHEDULABLE_TASKS']" in hint
        assert "@scheduler.task" not in hint
        assert versions(url) == before

        done, summary = imported(env, "--force", "--by", "importer")
        assert summary == "12 periodic tasks: 6 added, 0 updated, 0 unchanged, 6 not imported"
        for name, reason in NOT_MAPPED.items():
            assert done[name][0] == "not imported" and reason in done[name][1], done[name]
        assert (
            "holds another definition (version 1, by ann; differs in every)" in (done["clash"][1])
        )
        with Control(url) as control:
            stored = {s.name: s for s in control.schedules()}
        assert sorted(stored) == MAPPED
        assert {s.updated_by for n, s in stored.items() if n != "clash"} == {"importer"}
        report = stored["nightly report"]
        assert (report.task, report.cron, report.tz, report.every) == (
            "app.report", "0 3 * * *", "Europe/Paris", None
        )  # fmt: skip
        assert report.args == ("daily",) and report.kwargs == {"to": "ops"}
        assert report.options == {
            "queue": "reports", "routing_key": "reports.nightly", "priority": 5,
            "headers": {"team": "ops"}, "expires": 600,
        }  # fmt: skip
        assert report.description == "the nightly report" and report.enabled
        assert (report.start, report.end, report.max_runs) == (None, None, None)
        weekdays = stored["weekdays"]
        assert (weekdays.cron, weekdays.tz, weekdays.max_runs) == (
            "*/15 9-17 * * 1-5", "America/New_York", 1
        )  # fmt: skip
        tick = stored["tick"]
        assert (tick.task, tick.every, tick.args, tick.cron) == ("echo", 1.0, ("imported",), None)
        sync = stored["two-hourly"]
        assert (sync.every, sync.enabled) == (7200.0, False)
        assert (sync.start, sync.end) == (
            datetime(2030, 1, 1, tzinfo=UTC),
            datetime(2031, 1, 1, tzinfo=UTC),
        )
        assert sync.options == {"exchange": "sync", "expires": "2031-01-01T00:00:00+00:00"}
        launch = stored["launch"]
        assert (launch.at, launch.every, launch.cron, launch.max_runs) == (
            datetime(2030, 6, 1, 12, tzinfo=UTC), None, None, None
        )  # fmt: skip
        once = stored["done once"]  # one_off, and it ran already: django-celery-beat disables it
        assert (once.every, once.max_runs, once.enabled) == (3600.0, 1, False)

        # Again: nothing already imported changes.
        after = versions(url)
        again, summary = imported(env, "--force")
        assert {v for v, _ in again.values()} == {"unchanged", "not imported"}
        assert summary == "12 periodic tasks: 0 added, 0 updated, 6 unchanged, 6 not imported"
        assert versions(url) == after

        # An edit in django-celery-beat, then --update: a new version of what changed only.
        rows(env, "edit")
        updated, summary = imported(env, "--force", "--update", "--by", "importer")
        assert summary == "12 periodic tasks: 0 added, 2 updated, 5 unchanged, 5 not imported"
        assert updated["nightly report"] == ("updated", "cron")
        assert updated["clash"] == ("updated", "every")
        with Control(url) as control:
            report = control.schedule("nightly report")
            assert (report.cron, report.version, report.updated_by) == ("0 4 * * *", 2, "importer")
            assert control.schedule("clash").every == 300.0
        assert {n: v for n, v in versions(url).items() if n not in ("nightly report", "clash")} == {
            n: v for n, v in after.items() if n not in ("nightly report", "clash")
        }


@pytest.mark.postgres
def test_import_into_the_django_store_with_the_projects_tables_in_postgresql(
    tmp_path: Path,
) -> None:
    """django-celery-beat's tables in PostgreSQL, Relay's store in its own schema beside them."""
    base = require("postgres")
    tables, relay_schema = unique(), unique()
    sep = "&" if "?" in base else "?"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{tables}"')
    db = f"{base}{sep}options={quote(f'-c search_path={tables}')}"
    env = site_env(db, RELAY={"BACKEND": f"django://default?schema={relay_schema}"})
    env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.site.celery_beat_settings"

    def relay_schema_exists() -> bool:
        with psycopg.connect(base) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (relay_schema,)
            ).fetchone()
        return found is not None

    try:
        rows(env, "fill")
        _, summary = imported(env, "--dry-run", "--force")
        assert (
            summary == "12 periodic tasks: 7 would add, 0 would update, 0 unchanged, 5 not imported"
        )
        assert not relay_schema_exists()
        _, summary = imported(env, "--force")
        assert summary == "12 periodic tasks: 7 added, 0 updated, 0 unchanged, 5 not imported"
        _, summary = imported(env, "--force")
        assert summary == "12 periodic tasks: 0 added, 0 updated, 7 unchanged, 5 not imported"
        with Control(f"{base}{sep}schema={relay_schema}") as control:
            report = control.schedule("nightly report")
        assert (report.cron, report.tz, report.version) == ("0 3 * * *", "Europe/Paris", 1)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            for schema in (tables, relay_schema):
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_naive_times_are_read_in_the_sites_time_zone(tmp_path: Path) -> None:
    """With ``USE_TZ = False`` Django keeps times naive, in ``TIME_ZONE``."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    env = site_env(
        tmp_path / "db.sqlite3", RELAY={"BACKEND": url}, USE_TZ=False, TIME_ZONE="Europe/Paris"
    )
    env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.site.celery_beat_settings"
    rows(env, "naive")
    done, _ = imported(env, "--force")
    assert done["launch"][0] == "added"
    with Control(url) as control:  # 12:00 in Paris in June is 10:00 UTC
        assert control.schedule("launch").at == datetime(2030, 6, 1, 10, tzinfo=UTC)


def test_import_names_the_fix_without_django_celery_beat(tmp_path: Path) -> None:
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": f"sqlite:///{tmp_path}/r.db"})
    done = manage(env, "relay_import_celery_beat", "--dry-run")
    assert done.returncode == 1
    assert "add it (pip install django-celery-beat)" in done.stderr
    assert not (tmp_path / "r.db").exists()


def test_a_dry_run_on_a_claim_store_names_the_lease_backends_and_creates_nothing(
    tmp_path: Path,
) -> None:
    env = beat_site(tmp_path, f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim")
    done = manage(env, "relay_import_celery_beat", "--dry-run")
    assert done.returncode == 1 and "needs a lease backend" in done.stderr
    assert "postgresql://" in done.stderr and not (tmp_path / "claims.db").exists()


@pytest.mark.slow
def test_an_imported_schedule_runs_on_a_live_instance(tmp_path: Path) -> None:
    """Without --force only the task a live instance allows is imported (not on a code job's
    name), and that instance runs it with the row's arguments."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    log = tmp_path / "runs.log"
    args = {"name": "i1", "url": url, "log": str(log), "code_job": "two-hourly"}
    instance = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stored_instance", json.dumps(args)], cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])},
    )  # fmt: skip
    try:
        wait_until(lambda: (tmp_path / "relay.db").exists(), "the instance creates its store")
        with Control(url) as control:
            wait_until(control.allowed_tasks, "the instance's heartbeat names its tasks")
        env = beat_site(tmp_path, url)
        done, summary = imported(env)
        assert done["tick"][0] == "added"
        assert "no live instance allows task 'app.report'" in done["nightly report"][1]
        assert "a code-defined job has this name" in done["two-hourly"][1]
        assert summary.endswith("1 added, 0 updated, 0 unchanged, 11 not imported")

        def ran() -> list[list[object]]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [json.loads(line) for line in lines]

        runs = wait_until(lambda: len(ran()) >= 2 and ran(), "two runs of the imported schedule")
        assert all(run[0].startswith("tick@") and run[1:3] == [["imported"], 1] for run in runs)

        # Removed in Relay, it is imported again (the instance's record of it is no code job).
        with Control(url) as control:
            control.remove_schedule("tick")
        again, _ = imported(env)
        assert again["tick"][0] == "added"
    finally:
        instance.send_signal(signal.SIGTERM)
        instance.wait(timeout=30)
