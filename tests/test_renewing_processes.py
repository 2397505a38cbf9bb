"""One heartbeat for all the runs of an instance (a store with ``heartbeat_many``), across real
processes: the runs one process executes stay held against another process for several leases,
renewed together, and end as that process records them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from relay import AcquireRequest, Outcome, RunState, open_backend
from relay.contract import is_lease
from tests.support.backends import nats_kv_lease, redis_lease, sqlite_lease
from tests.support.procs import ROOT, finish, next_event

LEASE = 5.0
"""Seconds: a renewal a second keeps it four seconds ahead, even on a loaded machine."""
HOLD = 3 * LEASE
"""The runs last three leases: without renewals another instance would take them over."""


@pytest.mark.parametrize(
    "store",
    [
        pytest.param(sqlite_lease, id="sqlite"),
        pytest.param(redis_lease, id="redis", marks=pytest.mark.redis),
        pytest.param(nats_kv_lease, id="nats", marks=pytest.mark.nats_kv),
    ],
)
def test_one_instance_renews_its_concurrent_runs_in_shared_calls(
    store: object, tmp_path: Path
) -> None:
    with store(tmp_path) as url:  # type: ignore[operator]
        other = open_backend(url)
        assert is_lease(other)
        slot = datetime.now(timezone.utc).replace(second=0, microsecond=0).timestamp() - 60
        jobs = ["renew-a", "renew-b", "renew-c"]
        args = {"url": url, "jobs": jobs, "slot": slot, "lease": LEASE, "heartbeat": 1.0,
                "hold": HOLD}  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.renewing_instance", json.dumps(args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
        )  # fmt: skip
        try:
            ready = next_event(proc)
            ends = time.monotonic() + HOLD - 1
            checks = 0
            while time.monotonic() < ends:  # another instance finds every run held throughout
                for job in jobs:
                    request = AcquireRequest(job, datetime.fromtimestamp(slot, timezone.utc),
                                             "two", LEASE)  # fmt: skip
                    assert other.acquire(request).outcome is Outcome.HELD, job
                checks += 1
                time.sleep(1)
            done = next_event(proc, timeout=120)
        finally:
            finish(proc)
        assert checks >= 2
        assert done["lost"] == [] and done["states"] == ["succeeded"] * 3
        sizes = done["sizes"]
        assert done["singles"] == 0 and len(sizes) >= 3, done  # renewed, never one by one
        together = sizes[sizes.index(3) :] if 3 in sizes else []
        assert len(together) >= 3 and set(together) == {3}, sizes  # once in one call, they stay
        records = {r.id: r for job in jobs for r in other.runs(job)}
        assert sorted(records) == sorted(ready["runs"])
        assert {(r.state, r.attempt) for r in records.values()} == {(RunState.SUCCEEDED, 1)}
        other.close()
