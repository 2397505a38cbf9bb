"""The examples do what their docstrings claim."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType

import pytest

import relay
from relay.testing import FakeClock, SimulatedCrash, runs_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def run(attempt: int, token: int) -> relay.Run:
    slot = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    return relay.Run(relay.run_id("bill", slot), "bill", slot, attempt, token, "test")


def test_a_retried_run_charges_once_and_a_stale_runner_cannot_overwrite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    payments = load("payments", monkeypatch, tmp_path)
    first, taken_over = run(1, 7), run(2, 9)
    payments.bill(first)
    payments.bill(taken_over)  # the same run again, after a takeover
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM payments").fetchone() == (1,)
    assert payments.publish_report(first, "late write from the replaced runner") is False
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        assert conn.execute("SELECT token FROM reports").fetchone() == (9,)


def test_quickstart_defines_its_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    quickstart = load("quickstart", monkeypatch, tmp_path)
    job = quickstart.scheduler.jobs["refresh"]
    assert (job.overlap, job.max_attempts, job.catch_up) == ("skip", 3, 60.0)
    quickstart.scheduler.backend.close()


def test_quickstart_runs_every_five_seconds_on_the_fake_clock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, relay_clock: FakeClock
) -> None:
    quickstart = load("quickstart", monkeypatch, tmp_path)
    relay_clock.drive(quickstart.scheduler)
    relay_clock.advance(minutes=1)
    records = runs_of("refresh", store=quickstart.scheduler.backend)
    start = relay_clock.now() - timedelta(minutes=1)
    assert [r.scheduled_for for r in records] == [
        start + timedelta(seconds=5 * k) for k in range(13)
    ]
    assert {r.state for r in records} == {relay.RunState.SUCCEEDED}
    quickstart.scheduler.backend.close()


def test_a_bill_taken_over_after_a_crash_charges_once_and_emails_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, relay_clock: FakeClock
) -> None:
    payments = load("payments", monkeypatch, tmp_path)
    receipts: list[tuple[str, int]] = []

    def send_receipt(run: relay.Run) -> None:
        receipts.append((run.id, run.attempt))
        if run.attempt == 1 and run.scheduled_for.minute == 1:
            raise SimulatedCrash  # killed after the email left, before the run was recorded

    monkeypatch.setattr(payments, "send_receipt", send_receipt)
    relay_clock.drive(payments.scheduler)
    relay_clock.advance(minutes=3)
    records = runs_of("bill", store=payments.scheduler.backend)
    assert [(r.scheduled_for.minute, r.attempt, r.state) for r in records] == [
        (0, 1, "succeeded"), (1, 2, "succeeded"), (2, 1, "succeeded"), (3, 1, "succeeded")
    ]  # fmt: skip
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        charged = conn.execute("SELECT run_id FROM payments ORDER BY run_id").fetchall()
    assert [row[0] for row in charged] == [r.id for r in records]  # once per run
    crashed = records[1].id
    assert [attempt for run_id, attempt in receipts if run_id == crashed] == [1, 2]  # twice
    payments.scheduler.backend.close()
