"""``relay schedules``: list, show, add, edit, rm, history, export and apply, on a SQLite store
(the contract suite holds every lease backend to the steps underneath)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from relay import Control, open_backend
from relay.cli import main
from relay.health import InstanceInfo

UTC = timezone.utc


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A store with a live instance allowing the task ``echo``."""
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    backend = open_backend(store)
    info = InstanceInfo(
        "host:1", "scheduler", "host", 1, datetime.now(UTC), "0", 10.0, tasks=("echo",)
    )
    backend.record_instance(info, 600)
    backend.close()
    return store


def relay_cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})


def test_add_edit_history_rm(url: str) -> None:
    added = relay_cli("schedules", "add", "report", "echo", "--cron", "0 3 * * *", "--tz",
                      "Europe/Paris", "--args", "[1]", "--by", "ann", "--backend", url)  # fmt: skip
    assert added.exit_code == 0, added.output
    assert "added report (version 1)" in added.output
    listed = relay_cli("schedules", "list", "--backend", url)
    assert "report" in listed.output and "Europe/Paris" in listed.output
    assert "1 live instance" in listed.output
    edited = relay_cli("schedules", "edit", "report", "--version", "1", "--every", "15m",
                       "--by", "bob", "--backend", url)  # fmt: skip
    assert edited.exit_code == 0 and "version 2" in edited.output
    stale = relay_cli(
        "schedules", "edit", "report", "--version", "1", "--disable", "--backend", url
    )
    assert stale.exit_code == 1 and "at version 2" in stale.output and "by bob" in stale.output
    shown = json.loads(relay_cli("schedules", "show", "report", "--json", "--backend", url).output)
    assert (shown["every"], shown["cron"], shown["version"]) == (900.0, None, 2)
    lines = relay_cli("schedules", "history", "report", "--json", "--backend", url).output
    changes = [json.loads(line) for line in lines.splitlines()]
    assert [(c["version"], c["by"]) for c in changes] == [(1, "ann"), (2, "bob")]
    assert relay_cli("schedules", "rm", "report", "--backend", url).exit_code == 0
    assert relay_cli("schedules", "list", "--json", "--backend", url).output == ""


def test_bad_input_and_unknown_tasks_are_refused_naming_the_fix(url: str) -> None:
    unknown = relay_cli("schedules", "add", "a", "nope", "--every", "60", "--backend", url)
    assert (
        unknown.exit_code == 1 and "allow: echo" in unknown.output and "--force" in unknown.output
    )
    bad = relay_cli("schedules", "add", "a", "echo", "--cron", "99 * * * *", "--backend", url)
    assert bad.exit_code == 1 and "cron" in bad.output
    forced = relay_cli(
        "schedules", "add", "a", "nope", "--every", "60", "--force", "--backend", url
    )
    assert forced.exit_code == 0


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_export_then_apply_changes_no_version(url: str, tmp_path: Path, suffix: str) -> None:
    with Control(url) as control:
        control.add_schedule("a", "echo", every=60, kwargs={"k": 1})
        control.add_schedule("b", "echo", cron="*/5 * * * *", tz="Europe/Paris", max_runs=3)
    file = tmp_path / f"schedules{suffix}"
    assert relay_cli("schedules", "export", str(file), "--backend", url).exit_code == 0
    applied = relay_cli("schedules", "apply", str(file), "--backend", url)
    assert applied.exit_code == 0 and "nothing to change" in applied.output
    with Control(url) as control:
        assert [s.version for s in control.schedules()] == [1, 1]


def test_apply_adds_updates_prunes_and_dry_run_writes_nothing(url: str, tmp_path: Path) -> None:
    with Control(url) as control:
        control.add_schedule("keep", "echo", every=60)
        control.add_schedule("old", "echo", every=60)
    file = tmp_path / "s.json"
    file.write_text(json.dumps({"schedules": [
        {"name": "keep", "task": "echo", "every": 120},
        {"name": "new", "task": "echo", "at": "2099-01-01T00:00:00Z"},
    ]}))  # fmt: skip
    dry = relay_cli("schedules", "apply", str(file), "--prune", "--dry-run", "--backend", url)
    assert dry.exit_code == 0, dry.output
    assert dry.output.splitlines() == [
        "would add new (task echo)", "would update keep: every", "would remove old",
    ]  # fmt: skip
    with Control(url) as control:
        assert [(s.name, s.version) for s in control.schedules()] == [("keep", 1), ("old", 1)]
    assert relay_cli("schedules", "apply", str(file), "--prune", "--backend", url).exit_code == 0
    again = relay_cli("schedules", "apply", str(file), "--prune", "--backend", url)
    assert "nothing to change" in again.output
    with Control(url) as control:
        assert [(s.name, s.version) for s in control.schedules()] == [("keep", 2), ("new", 1)]


def test_a_bad_file_changes_nothing(url: str, tmp_path: Path) -> None:
    file = tmp_path / "s.json"
    file.write_text(json.dumps([{"name": "a", "task": "echo", "every": 60},
                                {"name": "b", "task": "echo", "cron": "bad"}]))  # fmt: skip
    result = relay_cli("schedules", "apply", str(file), "--backend", url)
    assert result.exit_code == 1 and "schedule 'b'" in result.output
    with Control(url) as control:
        assert control.schedules() == []


@pytest.mark.parametrize(
    "third",
    [
        {"name": "c", "task": "echo", "at": "2001-01-01T00:00:00Z"},
        {"name": "c", "task": "nobody", "every": 60},
    ],
)
def test_a_refused_third_entry_of_five_writes_nothing_and_is_named(
    url: str, tmp_path: Path, third: dict[str, object]
) -> None:
    items = [{"name": n, "task": "echo", "every": 60} for n in "abcde"]
    items[2] = third
    file = tmp_path / "s.json"
    file.write_text(json.dumps({"schedules": items}))
    for dry_run in (["--dry-run"], []):
        result = relay_cli("schedules", "apply", str(file), *dry_run, "--backend", url)
        assert result.exit_code == 1, result.output
        assert "entry 3 (schedule 'c')" in result.output and "Traceback" not in result.output
    with Control(url) as control:
        assert control.schedules() == []


def test_reading_commands_create_nothing(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    for args in (["list"], ["show", "a"], ["history", "a"], ["export", str(tmp_path / "x.json")]):
        result = relay_cli("schedules", *args, "--backend", missing)
        assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "none.db").exists()


def test_relay_jobs_shows_where_a_stored_schedule_runs_and_what_remains(url: str) -> None:
    with Control(url) as control:
        control.add_schedule("few", "echo", every=60, max_runs=3)
        control.add_schedule("orphan", "gone", every=60, force=True)
        control.add_schedule("later", "echo", at=datetime(2099, 1, 1, tzinfo=UTC))
    lines = relay_cli("jobs", "--json", "--backend", url).output.splitlines()
    notes = {row["job"]: row["stored"] for row in map(json.loads, lines)}
    assert notes["few"] == "task echo, on 1 live instance(s); 3 slot(s) left"
    assert notes["orphan"] == "not runnable: no live instance allows task gone"
    assert notes["later"] == "task echo, on 1 live instance(s); 1 slot(s) left"
    table = relay_cli("jobs", "--backend", url).output
    assert "not runnable" in table and "stored schedule" in table
