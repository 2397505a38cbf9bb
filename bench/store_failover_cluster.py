"""What ``wait_replicas`` costs and what it saves, on Redis servers of the benchmark's own.

1. Per step: ``acquire``, ``start``, ``finish`` and ``release`` of one run with
   ``wait_replicas=1`` (WAIT behind the script, in the same round trip) against the same step
   without it, on one primary with one replica, interleaved in the same run: a ratio per step.
2. Redis Cluster failovers (three primaries, a replica each, three instances, a job every
   second; see ``tests/support/cluster_race.py``): runs lost and run twice, and failover -> next
   started run p50 / p99, the replica cut off for 2 s before its primary is killed, with
   ``wait_replicas=1`` and then without it (the hazard).

    python bench/store_failover_cluster.py [--quick]

Every server is started here on free loopback ports and killed at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, at_most, ratio_at_most  # noqa: E402
from relay.backends.redis_lease import RedisLeaseBackend  # noqa: E402
from relay.contract import AcquireRequest  # noqa: E402
from tests.support.cluster_race import Race, race  # noqa: E402
from tests.support.redis_server import own_redis_replicated  # noqa: E402

UTC = timezone.utc
STEPS = ("acquire", "start", "finish", "release")


def per_step(url: str, count: int) -> dict[str, dict[str, float]]:
    """Median microseconds of each step, with and without ``wait_replicas=1``, interleaved."""
    backends = {
        "wait_replicas=1": RedisLeaseBackend.from_url(f"{url}?wait_replicas=1&prefix=w:"),
        "off": RedisLeaseBackend.from_url(f"{url}?prefix=o:"),
    }
    timings: dict[str, dict[str, list[float]]] = {
        kind: {step: [] for step in STEPS} for kind in backends
    }
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    clock = time.perf_counter
    for i in range(count):
        for kind, backend in backends.items():
            took = timings[kind]
            for n, last in ((2 * i, "finish"), (2 * i + 1, "release")):
                request = AcquireRequest(f"job{n % 100}", base + timedelta(seconds=n), "me", 30)
                start = clock()
                run = backend.acquire(request).run
                took["acquire"].append(clock() - start)
                assert run is not None
                start = clock()
                backend.start(run.id, run.token, "me", 30)
                took["start"].append(clock() - start)
                start = clock()
                if last == "finish":
                    backend.finish(run.id, run.token, succeeded=True)
                else:
                    backend.release(run.id, run.token)
                took[last].append(clock() - start)
    for backend in backends.values():
        backend.close()
    return {
        kind: {step: statistics.median(values) * 1e6 for step, values in steps.items()}
        for kind, steps in timings.items()
    }


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def failovers(count: int) -> tuple[Race, Race]:
    """``count`` failovers with ``wait_replicas=1``, then ``count`` without it, each with the
    replica 2 s behind."""
    with tempfile.TemporaryDirectory() as folder:
        waited = race(Path(folder, "wait"), "&wait_replicas=1&wait_timeout=0.5", failovers=count,
                      lag=2.0)  # fmt: skip
        print(f"wait_replicas=1: {waited.summary()}")
        hazard = race(Path(folder, "off"), "", failovers=count, lag=2.0)
        print(f"no wait_replicas, replica 2 s behind: {hazard.summary()}")
    return waited, hazard


def rows(quick: bool = False) -> list[Row]:
    """The table rows: each step's cost as a ratio, and the Cluster failovers."""
    with tempfile.TemporaryDirectory() as folder, own_redis_replicated(Path(folder)) as servers:
        micros = per_step(servers[0].url, 300 if quick else 2000)
    out = [
        Row(
            "store_failover",
            f"{step}, wait_replicas=1 (one replica)",
            micros["wait_replicas=1"][step],
            "µs",
            micros["off"][step],
            "same step without",
            "<= 2x",
            ratio_at_most(2.0),
        )
        for step in STEPS
    ]
    for step in STEPS:
        print(f"  {step:<8} {micros['wait_replicas=1'][step]:7.1f} us with WAIT, "
              f"{micros['off'][step]:7.1f} us without")  # fmt: skip
    waited, hazard = failovers(3 if quick else 10)
    for name, result in (("wait_replicas=1", waited), ("no wait_replicas, lagging", hazard)):
        figure = f"Cluster, {len(result.failovers)} failovers, {name}"
        out += [
            Row("store_failover", f"{figure}: runs lost", len(result.lost()), "runs",
                target="0" if result is waited else "",
                check=at_most(0) if result is waited else None),
            Row("store_failover", f"{figure}: runs done twice", len(result.doubled()), "runs",
                target="0" if result is waited else "",
                check=at_most(0) if result is waited else None),
        ]  # fmt: skip
        delays = result.next_run_delays()
        out += [
            Row("store_failover", f"{figure}: kill -> next run, p50", statistics.median(delays),
                "s"),
            Row("store_failover", f"{figure}: kill -> next run, p99", _percentile(delays, 0.99),
                "s"),
        ]  # fmt: skip
    return out


def main() -> None:
    """Print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and 3 failovers")
    for row in rows(parser.parse_args().quick):
        ratio = "" if row.ratio is None else f"  {row.ratio:.2f}x {row.baseline_name}"
        print(f"{row.figure}: {row.value:.2f} {row.unit}{ratio}  {row.target}")


if __name__ == "__main__":
    main()
