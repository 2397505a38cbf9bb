"""The app's management commands, each in a real ``manage.py`` process."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from relay import AcquireRequest, Control, open_backend
from relay.backends.postgres import SCHEMA_VERSION
from relay.engine import Decider
from relay.errors import StoreNotFound
from relay.jobs import make_job
from tests.django_app.support import manage, site_env, spawn_manage
from tests.support.backends import postgres_lease
from tests.support.services import require


def fill(url: str) -> list[str]:
    """Two jobs' runs: one succeeded, one running."""
    store = open_backend(url)
    ids = []
    for job in ("cleanup", "report"):
        won = store.acquire(AcquireRequest(job, store.now().replace(microsecond=0), "h:1", 30)).run
        assert won is not None
        store.start(won.id, won.token, won.owner, 30)
        if job == "cleanup":
            store.finish(won.id, won.token, succeeded=True)
        ids.append(won.id)
    store.close()
    return ids


@pytest.mark.slow
def test_relay_dramatiq_schedules_the_projects_periodic_actors(tmp_path: Path) -> None:
    """The tasks module of an installed app is found; its actor's runs are won and enqueued."""
    db = tmp_path / "db.sqlite3"
    env = site_env(db, RELAY={"BACKEND": "django", "QUEUE_LEASE": 60})
    proc = spawn_manage(env, "relay_dramatiq", "--tick", "0.2")
    try:
        deadline = time.monotonic() + 60
        runs: list[object] = []
        while len(runs) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            try:  # Django creates the file before the instance writes Relay's schema into it
                store = open_backend(f"sqlite:///{db}", read_only=True)
            except StoreNotFound:
                continue
            assert store.capability == "lease"
            runs = store.runs("tick", 10)
            store.close()
        assert len(runs) >= 2, proc.poll()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr


def test_relay_dramatiq_names_the_fix(tmp_path: Path) -> None:
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": f"sqlite:///{tmp_path}/r.db"})
    missing = manage(env, "relay_dramatiq", "no_such_module")
    assert missing.returncode == 1 and "cannot import 'no_such_module'" in missing.stderr
    none = manage(env, "relay_dramatiq", "tests.django_app.site.urls")
    assert none.returncode == 1 and "no periodic actor in tests.django_app.site.urls" in none.stderr
    assert "@relay_dramatiq.periodic" in none.stderr


def test_relay_runs_jobs_and_timeline_read_the_settings_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    ids = fill(url)
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url})
    runs = manage(env, "relay_runs", "--job", "report", "--json")
    assert runs.returncode == 0, runs.stderr
    assert [r["id"] for r in json.loads(runs.stdout)] == [ids[1]]
    jobs = manage(env, "relay_jobs", "--json")
    assert jobs.returncode == 0, jobs.stderr
    listed = {j["job"]: j for j in map(json.loads, jobs.stdout.splitlines())}
    assert listed["cleanup"]["last_run"]["state"] == "succeeded" and listed["report"]["live"]
    page = tmp_path / "t.html"
    drawn = manage(env, "relay_timeline", "--since", "1h", "--html", str(page))
    assert drawn.returncode == 0 and "2 runs of 2 jobs" in drawn.stdout, drawn.stderr
    assert all(f'data-run="{i}"' in page.read_text() for i in ids)


def test_read_commands_fail_cleanly_and_create_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url})
    for command in (["relay_runs"], ["relay_jobs"], ["relay_timeline", "--html", "x.html"]):
        done = manage(env, *command)
        assert done.returncode == 1 and "does not exist" in done.stderr, (command, done.stderr)
    unknown = manage(env, "relay_runs", "--bogus")
    # click 8.1 says "No such option: --bogus", later ones "No such option '--bogus'"
    assert unknown.returncode == 1 and re.search(r"No such option:? '?--bogus", unknown.stderr)
    assert not (tmp_path / "relay.db").exists()


def test_relay_pause_resume_and_trigger(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    fill(url)
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url})
    paused = manage(env, "relay_pause", "report", "--reason", "disk full")
    assert paused.returncode == 0, paused.stderr
    with Control(url) as control:
        (report,) = [j for j in control.jobs() if j.name == "report"]
        assert report.paused and report.paused_reason == "disk full"
        assert manage(env, "relay_resume", "report").returncode == 0
        assert not control.job("report").paused
        triggered = manage(env, "relay_trigger", "cleanup")
        assert triggered.returncode == 0, triggered.stderr
        assert any("@manual:" in r.id for r in control.backend.runs("cleanup", 10))
    unknown = manage(env, "relay_pause", "reprot")
    assert unknown.returncode == 1 and "reprot" in unknown.stderr


def test_relay_next_reads_the_settings_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    store = open_backend(url)
    decider = Decider(store, owner="h:1", lease=30)
    decider.add(make_job(store, name="nightly", cron="30 2 * * *", tz="Europe/Paris"))
    decider.sweep()  # registers the job, as an instance's first sweep does
    store.close()
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url})
    shown = manage(env, "relay_next", "nightly", "--count", "2", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert len(rows) == 2 and all(row["local"][11:16] in ("02:30", "03:00") for row in rows)
    assert rows[0]["timezone"] == "Europe/Paris"


@pytest.mark.postgres
def test_relay_migrate_creates_the_settings_store_schema(tmp_path: Path) -> None:
    require("postgres")
    with postgres_lease(tmp_path) as url:
        env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url})
        created = manage(env, "relay_migrate")
        assert created.returncode == 0, created.stderr
        assert f"created Relay's schema at version {SCHEMA_VERSION}" in created.stdout
        again = manage(env, "relay_migrate")
        assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr
        open_backend(url + "&migrate=false", read_only=False).close()  # instances need no DDL


def test_relay_migrate_plan_and_contract_on_the_projects_database(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from relay.instances import InstanceInfo

    db = tmp_path / "db.sqlite3"
    env = site_env(db, RELAY={"BACKEND": "django"})
    assert manage(env, "relay_migrate").returncode == 0
    store = open_backend(
        f"sqlite:///{db}"
    )  # the Django store: Relay's tables in the project's file
    old = InstanceInfo(
        owner="old-beat:1:aa", role="beat", host="web-1", pid=1,
        started_at=datetime.now(timezone.utc), version="0.1.0", interval=10.0,
    )  # fmt: skip
    store.record_instance(old, 60)  # type: ignore[union-attr]
    store.close()
    plan = manage(env, "relay_migrate", "--plan")
    assert plan.returncode == 0, plan.stderr
    assert "usable by Relay 0.1.0 and newer" in plan.stdout
    assert "Relay 0.1.0: can go on beside it" in plan.stdout
    refused = manage(env, "relay_migrate", "--contract")
    assert refused.returncode == 1 and "old-beat:1:aa (Relay 0.1.0)" in refused.stderr
