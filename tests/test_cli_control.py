"""The control commands and the Control API they call, on a SQLite store (the contract suite
holds every lease backend to the operations underneath)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import relay
from relay import Control, RunState, UnsupportedOption, open_backend
from relay.cli import main
from relay.control import MAX_BACKFILL
from relay.engine import Decider
from relay.jobs import make_job

UTC = timezone.utc


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A store where a scheduler registered two jobs, `nightly` (cron, Paris) and `often`."""
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    backend = open_backend(store)
    decider = Decider(backend, owner="host:1", lease=30)
    decider.add(make_job(backend, name="nightly", cron="0 3 * * *", tz="Europe/Paris"))
    decider.add(make_job(backend, name="often", every=60, jitter=10))
    decider.sweep()  # registers the jobs
    backend.close()
    return store


def relay_cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250", **(env or {})})


def test_jobs_lists_schedule_next_due_and_pause(url: str) -> None:
    assert relay_cli("pause", "often", "--reason", "db migration", "--backend", url).exit_code == 0
    shown = relay_cli("jobs", "--backend", url)
    assert shown.exit_code == 0, shown.output
    assert "nightly" in shown.output and "Europe/Paris" in shown.output
    assert "db migration" in shown.output
    lines = relay_cli("jobs", "--json", env={"RELAY_BACKEND": url}).output.splitlines()
    by_name = {row["job"]: row for row in map(json.loads, lines)}
    assert (
        by_name["often"]["paused"] is True and by_name["often"]["paused_reason"] == "db migration"
    )
    assert (
        by_name["nightly"]["paused"] is False and by_name["nightly"]["timezone"] == "Europe/Paris"
    )
    due = datetime.fromisoformat(by_name["nightly"]["next_due"])
    assert due.astimezone(timezone(timedelta(hours=1))).hour == 3  # 03:00 Paris (winter)
    assert by_name["often"]["spec"]["jitter"] == 10


def test_pause_resume_and_trigger_from_the_command_line(url: str) -> None:
    assert "paused often" in relay_cli("pause", "often", "--backend", url).output
    assert "already paused" in relay_cli("pause", "often", "--backend", url).output
    assert "resumed often" in relay_cli("resume", "often", "--backend", url).output
    triggered = relay_cli("trigger", "often", "--backend", url)
    assert triggered.exit_code == 0 and "often@manual:" in triggered.output, triggered.output
    assert "pending (manual)" in triggered.output
    with Control(url) as control:
        (record,) = control.backend.runs("often")  # type: ignore[union-attr]
    assert record.id == triggered.output.split()[0] and record.state is RunState.PENDING


def test_resume_catch_up_needs_a_window_for_a_job_without_catch_up(url: str) -> None:
    relay_cli("pause", "often", "--backend", url)
    refused = relay_cli("resume", "often", "--missed", "catch_up", "--backend", url)
    assert refused.exit_code == 1 and "--window" in refused.output
    assert (
        relay_cli(
            "resume", "often", "--missed", "catch_up", "--window", "1h", "--backend", url
        ).exit_code
        == 0
    )


def test_backfill_creates_each_slot_once_and_is_bounded(url: str) -> None:
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    start = end - timedelta(minutes=4)
    args = ["backfill", "often", "--start", start.isoformat(), "--end", end.isoformat()]
    assert "5 runs created" in relay_cli(*args, "--backend", url).output
    assert "0 runs created, 5 slots" in relay_cli(*args, "--backend", url).output
    far = (end - timedelta(minutes=MAX_BACKFILL + 1)).isoformat()
    refused = relay_cli(
        "backfill", "often", "--start", far, "--end", end.isoformat(), "--backend", url
    )
    assert refused.exit_code == 1 and f"at most {MAX_BACKFILL}" in refused.output
    future = (end + timedelta(days=1)).isoformat()
    late = relay_cli(
        "backfill", "often", "--start", start.isoformat(), "--end", future, "--backend", url
    )
    assert late.exit_code == 1 and "future" in late.output


def test_prune_reports_what_it_deleted(url: str) -> None:
    assert "pruned 0 runs" in relay_cli("prune", "--older-than", "30d", "--backend", url).output
    bad = relay_cli("prune", "--older-than", "soon", "--backend", url)
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_unknown_jobs_and_claim_backends_are_refused_with_the_fix(url: str, tmp_path: Path) -> None:
    unknown = relay_cli("pause", "nope", "--backend", url)
    assert unknown.exit_code == 1 and "known jobs: nightly, often" in unknown.output
    claim = f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim"
    for args in (["jobs"], ["pause", "x"], ["resume", "x"], ["trigger", "x"],
                 ["prune", "--older-than", "1d"]):  # fmt: skip
        refused = relay_cli(*args, "--backend", claim)
        assert refused.exit_code == 1 and "needs a lease backend" in refused.output, args
    missing = relay_cli("jobs")
    assert missing.exit_code == 2 and "RELAY_BACKEND" in missing.output


def test_the_api_refuses_every_operation_on_a_claim_backend(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    with Control(f"sqlite:///{tmp_path / 'c.db'}?strategy=claim") as control:
        for operation in (
            control.jobs, lambda: control.pause("x"), lambda: control.resume("x"),
            lambda: control.trigger("x"), lambda: control.backfill("x", now, now),
            lambda: control.prune(1),
        ):  # fmt: skip
            with pytest.raises(UnsupportedOption):
                operation()
    assert relay.Control is Control


def test_jobs_only_reads_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    shown = relay_cli("jobs", "--backend", f"sqlite:///{missing}")
    assert shown.exit_code == 1 and "does not exist" in shown.output
    assert not missing.exists()
