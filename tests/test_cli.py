"""The ``relay`` command: the demo as a user runs it, and ``relay runs``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from relay import AcquireRequest, open_backend
from relay.cli import main
from relay.runs import from_ms


@pytest.mark.slow
def test_demo_kills_an_instance_and_loses_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "relay.cli", "demo", "--instances", "3", "--duration", "9"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    output = " ".join(done.stdout.split())  # the summary may wrap
    summary = output[output.find("runs scheduled") :] + done.stderr[-2000:]
    assert done.returncode == 0, summary
    assert "runs scheduled: 9" in output or "runs scheduled: 10" in output, summary
    assert "run twice: 0" in output and "lost: 0" in output, summary
    assert "was killed while running" in output and "took it over (attempt 2" in output, summary
    page = Path(output.split("timeline of every run: ")[1].split()[0])
    assert page.suffix == ".html" and 'data-marks="takeover-or-retry"' in page.read_text()
    page.unlink()


def test_runs_lists_recent_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    backend = open_backend(url)
    assert backend.capability == "lease"
    result = backend.acquire(AcquireRequest("nightly", from_ms(1_800_000_000_000), "me:1", 30))
    assert result.run is not None
    backend.finish(result.run.id, result.run.token, succeeded=True)
    backend.skip("nightly", from_ms(1_800_000_060_000), "missed")
    output = (
        CliRunner()
        .invoke(main, ["runs", "--backend", url, "--job", "nightly"], env={"COLUMNS": "200"})
        .output
    )
    assert "succeeded" in output and "skipped (missed)" in output and "me:1" in output


def test_runs_explains_bad_input(tmp_path: Path) -> None:
    unknown = CliRunner().invoke(main, ["runs", "--backend", "mysql://x"])
    assert unknown.exit_code == 1 and "known schemes" in unknown.output
    claim = CliRunner().invoke(
        main, ["runs", "--backend", f"sqlite:///{tmp_path / 'c.db'}?strategy=claim"]
    )
    assert claim.exit_code == 1 and "claim backend" in claim.output
