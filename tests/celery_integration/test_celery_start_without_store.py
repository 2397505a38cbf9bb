"""Celery beat and a prefork worker started while Relay's store is down: they wait, are not ready,
then run each run once.

The store sits behind a fault proxy that resets every connection until the test lets them
through; the broker (Redis) is up all along.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.celery_integration.cluster import cluster
from tests.celery_integration.test_celery_processes import (
    TOLERATE_STALLS,
    assert_every_second_once,
    redis_broker,
)
from tests.support.backends import LEASE_BACKENDS
from tests.support.event_log import read_events
from tests.support.fault_proxy import proxied
from tests.support.procs import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis]

# One store per host keeps the suite short: the standalone scheduler's test covers every store.
STORES = [pytest.param(name, marks=LEASE_BACKENDS[name][1], id=name) for name in ("postgres",)]


def healthy(url: str, role: str) -> bool:
    """Whether ``relay health --role ROLE`` (the probe) exits 0."""
    command = [sys.executable, "-m", "relay.cli", "health", "--backend", url, "--role", role]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    return done.returncode == 0


@pytest.mark.parametrize("store", STORES)
def test_beat_and_worker_started_with_the_store_down_wait_then_run_each_slot_once(
    store: str, tmp_path: Path
) -> None:
    factory, _ = LEASE_BACKENDS[store]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        proxy.set("reset")
        schedule = {"tick": {"every": 1, "relay": TOLERATE_STALLS}}
        with cluster(tmp_path, redis_broker(), near, schedule) as c:
            c.set(lease=5, heartbeat=1)
            beat = c.beat()
            worker = c.worker(pool="prefork", concurrency=1)
            c.wait_for("beat to wait", lambda: bool(read_events(c.relay_events, "store_waiting")))
            c.wait_for("the worker to wait", lambda: "waits for the store" in c.logs(tail=None))
            assert beat.poll() is None and worker.poll() is None, c.logs()
            assert c.events() == []
            assert not healthy(url, "beat") and not healthy(url, "worker")
            proxy.set("pass")
            c.wait_for("three runs", lambda: len(c.events("end")) >= 3)
            c.wait_for("a ready beat", lambda: healthy(url, "beat"), timeout=30)
            c.wait_for("a ready worker", lambda: healthy(url, "worker"), timeout=30)
            assert read_events(c.relay_events, "store_recovered")
            c.kill(beat)
            c.wait_quiet()
            events = c.events()
    assert_every_second_once(events)
