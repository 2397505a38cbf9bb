"""Real scheduler processes on each server claim backend: every second's run happens once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.claim_backends import server_claims

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = 3
SECONDS = 3.0


@pytest.fixture(params=server_claims())
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with request.param(tmp_path) as url:
        yield url


@pytest.mark.slow
def test_instances_run_each_slot_once(url: str, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    command = [sys.executable, "-m", "tests.backends.claim_scheduler_proc", url, str(log)]
    procs = [
        subprocess.Popen([*command, str(SECONDS)], cwd=ROOT, env=env, stderr=subprocess.PIPE)
        for _ in range(INSTANCES)
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr.decode()
    lines = log.read_text().splitlines()
    runs = Counter(line.split()[0] for line in lines)
    assert [run for run, count in runs.items() if count > 1] == []
    # Every instance ticks ten times a second, so no second in the middle goes unclaimed.
    assert len(runs) >= SECONDS - 2, lines
