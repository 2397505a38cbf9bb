"""The test kit gives an application's own scheduler a fresh store per test: a test run twice (a
second ``pytest`` on the same folder) runs its jobs twice, not once.

The application opens its store from a URL when it is imported, as applications do; the test only
drives it on the fake clock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

APP = """
import relay

scheduler = relay.Scheduler("sqlite:///app-relay.db")
ran = []


@scheduler.job(cron="*/5 * * * *", name="tick")
def tick(run: relay.Run) -> None:
    ran.append(run.id)
"""

TEST = """
import app
from relay.testing import runs_of


def test_an_hour_of_the_apps_job(relay_clock, relay_store):
    relay_clock.drive(app.scheduler)
    relay_clock.advance(hours=1)
    assert len(app.ran) == 13
    assert len(runs_of("tick")) == 13


def test_another_hour_in_another_test(relay_clock):
    app.ran.clear()
    relay_clock.drive(app.scheduler)
    relay_clock.advance(hours=1)
    assert len(app.ran) == 13
"""


def test_a_test_driving_the_apps_scheduler_runs_its_jobs_on_every_run(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "test_app.py").write_text(textwrap.dedent(TEST))
    # An ini file of its own: pytest would otherwise take any pyproject.toml above the folder.
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"]
    for attempt in (1, 2):
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"run {attempt}:\n{done.stdout}{done.stderr}"
    # The application's own store was never written by the tests.
    assert not (tmp_path / "app-relay.db").exists() or _runs(tmp_path / "app-relay.db") == 0


def _runs(path: Path) -> int:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM relay_runs WHERE state != 'job'").fetchone()
    return int(count)
