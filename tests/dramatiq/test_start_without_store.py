"""A ``dramatiq`` worker and ``relay-dramatiq`` started while Relay's store is down: they wait,
are not ready, then run each run once; importing the app opens nothing.

The store sits behind a fault proxy that resets every connection until the test lets them
through; the broker (Redis) is up all along.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.dramatiq.procs import ROOT, Deployment
from tests.dramatiq.test_processes import _redis_broker
from tests.support.backends import LEASE_BACKENDS, unique
from tests.support.event_log import read_events
from tests.support.fault_proxy import proxied

pytestmark = [pytest.mark.slow, pytest.mark.redis]

# One store per host keeps the suite short: the standalone scheduler's test covers every store.
STORES = [pytest.param(name, marks=LEASE_BACKENDS[name][1], id=name) for name in ("nats",)]


def healthy(url: str, role: str) -> bool:
    """Whether ``relay health --role ROLE`` (the probe) exits 0."""
    command = [sys.executable, "-m", "relay.cli", "health", "--backend", url, "--role", role]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    return done.returncode == 0


@pytest.mark.parametrize("store", STORES)
def test_worker_and_scheduler_started_with_the_store_down_wait_then_run_each_run_once(
    store: str, tmp_path: Path
) -> None:
    factory, _ = LEASE_BACKENDS[store]
    queue = unique("relay_dq")
    with (
        _redis_broker(queue) as broker_url,
        factory(tmp_path) as url,
        proxied(url) as (proxy, near),
    ):
        proxy.set("reset")
        jobs = {"tick": {"every": 1, "catch_up": 3}}
        d = Deployment(tmp_path, "redis", broker_url, queue, near, jobs, "5,1,10")
        try:
            # Importing the app (RelayMiddleware, @periodic) connects to nothing: a web process
            # that only sends messages starts with the store down.
            before = proxy.accepted
            imported = subprocess.run(
                [sys.executable, "-c", "import tests.dramatiq.app"], env=d.env(), cwd=ROOT,
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert imported.returncode == 0, imported.stderr
            assert proxy.accepted == before, "importing the app connected to the store"
            worker = d.worker("worker")
            scheduler = d.scheduler("scheduler")
            waiting = d.relay_events
            d.wait_for("relay-dramatiq to wait", lambda: read_events(waiting, "store_waiting"))
            d.wait_for("the worker to wait", lambda: "waits for the store" in d.logs())
            assert worker.poll() is None and scheduler.poll() is None, d.logs()
            assert d.events() == []
            assert not healthy(url, "dramatiq-scheduler")
            assert not healthy(url, "dramatiq-worker")
            proxy.set("pass")
            d.wait_for("three runs", lambda: len(d.events("done")) >= 3)
            d.wait_for("a ready scheduler", lambda: healthy(url, "dramatiq-scheduler"))
            d.wait_for("a ready worker", lambda: healthy(url, "dramatiq-worker"))
            assert d.stop(scheduler) == 0
            starts = Counter(e["run"] for e in d.events("start"))
        finally:
            d.close()
    assert starts and max(starts.values()) == 1, starts
