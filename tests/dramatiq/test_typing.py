"""mypy refuses lease-only middleware options on a claim backend (tests/typing)."""

from __future__ import annotations

import subprocess
import sys

from tests.dramatiq.procs import ROOT


def test_typing_file_checks_cleanly_under_strict_mypy() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "tests/typing/dramatiq_options.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
