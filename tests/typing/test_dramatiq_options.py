"""mypy refuses lease-only middleware options on a claim backend (dramatiq_options.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_typing_file_checks_cleanly_under_strict_mypy() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "tests/typing/dramatiq_options.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
