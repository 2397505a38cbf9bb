"""The examples do what their docstrings claim."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

import pytest

import relay

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
