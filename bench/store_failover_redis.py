"""Redis Sentinel failovers under running instances: runs lost and doubled, and the next start.

A primary, a replica and three sentinels of the bench's own (``tests.support.redis_sentinel``),
three standalone instances running a job every second (0.4 s of work, lease 4 s, heartbeat
0.5 s, catch-up 60 s), and ``N`` failovers while runs are in flight: the primary is SIGKILLed,
Sentinel promotes the replica, the old primary rejoins as a replica. Every other failover first
lets the replica fall 2 s behind (frozen with SIGSTOP, its link cut, while the primary takes
writes), so Sentinel promotes a replica lacking the last writes. The same race runs without and
with ``wait_replicas=1``; for each it counts, over the slots of the race, runs never completed
(lost), runs completed twice (doubled) and among those the ones the store forgot (no instance
had reported them abandoned), and times each kill to the next started run (p50, p99).

    python bench/store_failover_redis.py [--failovers 12]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, at_most  # noqa: E402
from tests.support.backends import unique  # noqa: E402
from tests.support.failover_race import RaceResult, race  # noqa: E402
from tests.support.redis_sentinel import own_sentinel_topology  # noqa: E402

BENCH = "store_failover"
BEHIND = 2.0


def run(failovers: int, wait_replicas: int) -> RaceResult:
    """One race through ``failovers`` failovers (every other one with the replica behind)."""
    with (
        tempfile.TemporaryDirectory(prefix="relay-sentinel-") as folder,
        own_sentinel_topology(Path(folder) / "topology") as topology,
    ):
        query = f"prefix={unique()}:" + (f"&wait_replicas={wait_replicas}" if wait_replicas else "")
        steps = [
            (lambda: topology.fail_over(behind=BEHIND)) if i % 2 else topology.fail_over
            for i in range(failovers)
        ]
        return race(topology.url(query=query), Path(folder) / "race", steps)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def rows(quick: bool = False) -> list[Row]:
    """Rows without and with ``wait_replicas=1`` (``quick``: 4 failovers each, else 12)."""
    return measure(4 if quick else 12)


def measure(failovers: int) -> list[Row]:
    """Rows without and with ``wait_replicas=1``, ``failovers`` failovers each."""
    out: list[Row] = []
    for wait in (0, 1):
        result = run(failovers, wait)
        print(f"sentinel, wait_replicas={wait}:", result.summary(), file=sys.stderr, flush=True)
        name = f"Redis Sentinel, wait_replicas={wait}, {failovers} failovers ({failovers // 2} "
        name += f"behind {BEHIND:g} s), {result.slots} slots"
        guarded = at_most(0) if wait else None
        target = "0" if wait else ""
        out += [
            Row(
                BENCH, f"{name}: runs lost", len(result.lost), "runs", target=target, check=guarded
            ),
            Row(BENCH, f"{name}: runs doubled", len(result.doubled), "runs"),
            Row(
                BENCH,
                f"{name}: runs doubled because the store forgot a step",
                len(result.stores_lost),
                "runs",
                target=target,
                check=guarded,
            ),
            Row(BENCH, f"{name}: runs abandoned by their runner", len(result.abandoned), "runs"),
            Row(BENCH, f"{name}: kill -> next start, p50", statistics.median(result.delays), "s"),
            Row(BENCH, f"{name}: kill -> next start, p99", _percentile(result.delays, 0.99), "s"),
            Row(
                BENCH, f"{name}: kill -> promotion, p50", statistics.median(result.promotions), "s"
            ),
        ]
    return out


def main() -> None:
    """Run both races and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failovers", type=int, default=12)
    args = parser.parse_args()
    for row in measure(args.failovers):
        print(f"{row.figure}: {row.value:g} {row.unit}")


if __name__ == "__main__":
    main()
