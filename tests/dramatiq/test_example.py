"""The example app starts with its one documented command and runs each report once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.dramatiq.procs import ROOT
from tests.support import services
from tests.support.backends import unique


@pytest.mark.slow
@pytest.mark.redis
def test_example_runs_each_report_once(tmp_path: Path) -> None:
    namespace = unique("relay_example_t")
    env = {
        **os.environ,
        "EXAMPLE_NAMESPACE": namespace,
        "REDIS_URL": services.SERVICES["redis"].url,
        "RELAY_BACKEND": f"sqlite:///{tmp_path / 'relay.db'}",
    }
    try:
        result = subprocess.run(
            [sys.executable, "examples/dramatiq_app/run.py", "--seconds", "7"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        client = redis.Redis.from_url(services.SERVICES["redis"].url)
        keys = list(client.scan_iter(match=f"{namespace}*"))
        if keys:
            client.delete(*keys)
        client.close()
    output = result.stdout + result.stderr
    ran = Counter(re.findall(r"ran (report@\S+)", output))
    enqueued = Counter(re.findall(r"relay.events.dispatched dispatched (report@\S+)", output))
    assert result.returncode == 0, output
    assert ran and max(ran.values()) == 1, output
    assert max(enqueued.values()) == 1, output
    assert output.count("relay.dramatiq.scheduler stopped") == 2, output
