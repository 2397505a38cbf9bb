"""Celery failover as a distribution: SIGKILL the worker child running a run, time its next start.

Real processes (``tests/celery_integration/cluster.py``): one ``celery beat`` with
``RelayScheduler``, two prefork workers of one child each, a Redis broker and a SQLite store. The
one job's run never ends by itself. ``N`` times: wait a random moment into the run, SIGKILL the
worker child running it (its parent starts a new child), and time kill -> the next start written
by a task. The run comes back through the beat's sweep (every heartbeat) once the lease expired,
then through the broker; the bound is ``lease + heartbeat + 0.5 s`` (the beat's wake-up and one
broker delivery).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, at_most  # noqa: E402

LEASE, HEARTBEAT = 1.0, 0.25
REDIS = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def distribution(kills: int) -> list[float]:
    """``kills`` worker-child SIGKILLs: seconds from each kill to the run's next start."""
    from tests.celery_integration.cluster import cluster

    spec = {"every": 3600, "kwargs": {"sleep": 10**6}}
    spec["relay"] = {"catch_up": 86400, "max_attempts": 10**6}
    delays = []
    with tempfile.TemporaryDirectory(prefix="relay-failover-celery-") as folder:
        tmp = Path(folder)
        with cluster(tmp, REDIS, f"sqlite:///{tmp / 'relay.db'}", {"long": spec}) as c:
            c.set(lease=LEASE, heartbeat=HEARTBEAT, queue_lease=2 * LEASE)
            c.beat()
            c.worker(pool="prefork", concurrency=1)
            c.worker(pool="prefork", concurrency=1)
            c.wait_for("the first start", lambda: c.events("start") != [], timeout=120)
            for _ in range(kills):
                time.sleep(random.uniform(0.05, LEASE))
                starts = c.events("start")
                count = len(starts)
                killed_at = time.time()
                os.kill(starts[-1]["pid"], signal.SIGKILL)
                c.wait_for("the next start", lambda: len(c.events("start")) > count)  # noqa: B023
                delays.append(c.events("start")[count]["at"] - killed_at)
    return delays


def rows(quick: bool = False) -> list[Row]:
    """One row: the worst delay, with p50 and p99 in the figure."""
    delays = sorted(distribution(10 if quick else 100))
    p50 = statistics.median(delays)
    p99 = delays[min(len(delays) - 1, round(0.99 * (len(delays) - 1)))]
    bound = LEASE + HEARTBEAT + 0.5
    figure = (
        f"celery: worker child SIGKILL -> next start, {len(delays)}x (lease {LEASE:g} s, "
        f"heartbeat {HEARTBEAT:g}): p50 {p50:.3f} s, p99 {p99:.3f} s; max"
    )
    print(figure, f"{delays[-1]:.3f} s", file=sys.stderr, flush=True)
    return [Row("failover", figure, delays[-1], "s", None, "", f"<= {bound:g} s", at_most(bound))]


if __name__ == "__main__":
    for row in rows(quick="--quick" in sys.argv):
        print(row.figure, f"{row.value:.3f} s", row.target, row.met)
