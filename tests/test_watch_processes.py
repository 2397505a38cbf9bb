"""A job turning overdue is announced once across the fleet, not once per instance: several real
processes check the same overdue job at the same moment, and one of them announces it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from relay import LeaseBackend, open_backend
from relay.contract import marks_once
from tests.support.procs import ROOT

PROCESSES = 4


@pytest.mark.slow
def test_four_instances_announce_one_overdue_job_once(lease_url: str) -> None:
    store = open_backend(lease_url)
    assert isinstance(store, LeaseBackend)
    if not marks_once(store):
        store.close()
        pytest.skip(f"{store.name} keeps no marks: each instance announces (documented)")
    store.register_jobs({"late": '{"every": 60.0, "schedule": "every 60s"}'})
    an_hour_ago = (store.now() - timedelta(hours=1)).replace(second=0, microsecond=0)
    store.skip("late", an_hour_ago, "missed")
    store.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    start_at = time.time() + 3  # all have imported Relay and opened the store by then
    procs = []
    for n in range(PROCESSES):
        args = {"url": lease_url, "job": "late", "name": f"i{n}", "start_at": start_at}
        command = [sys.executable, "-m", "tests.support.watch_once", json.dumps(args)]
        pipe = subprocess.PIPE
        procs.append(
            subprocess.Popen(command, stdout=pipe, stderr=pipe, text=True, cwd=ROOT, env=env)
        )
    announced = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        announced += json.loads(out.splitlines()[-1])
    assert announced == ["job_overdue"]
