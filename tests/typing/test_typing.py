"""mypy accepts the documented API and rejects lease-only options on a claim backend."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the 'dev' extra")

HERE = Path(__file__).parent


def run_mypy(path: Path) -> tuple[str, int]:
    stdout, stderr, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--hide-error-context", str(path)]
    )
    return stdout + stderr, status


def test_documented_uses_type_check() -> None:
    output, status = run_mypy(HERE / "should_pass.py")
    assert status == 0, output


def test_lease_only_options_on_a_claim_backend_do_not_type_check() -> None:
    path = HERE / "should_fail.py"
    output, _ = run_mypy(path)
    lines = path.read_text().splitlines()
    expected = {n for n, line in enumerate(lines, start=1) if line.endswith("# E")}
    failing = {int(m) for m in re.findall(rf"{re.escape(path.name)}:(\d+): error", output)}
    assert expected, "no marked lines"
    assert failing == expected, output
