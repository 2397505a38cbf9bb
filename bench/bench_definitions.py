"""Benchmark what declaring job definitions costs an instance's heartbeat (issue 39, item 7).

Usage: ``python bench/bench_definitions.py [--jobs 10000] [--url redis://127.0.0.1:6379/0]``.

Three instances share a store. One beat of the measured instance is what its loop does every
heartbeat (10 s) while the fleet agrees: record its own record, then read every instance's
record. It is measured with ``J`` jobs declared by each instance (the same definitions, as
outside a rollout), against the same beat with nothing declared (what Relay 0.1.0 writes), on a
SQLite file and on Redis when it answers. The figure is per beat, not per tick or per job.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from bench.table import Row, at_most, render
from relay import LeaseBackend, open_backend
from relay.errors import BackendUnavailable
from relay.instances import InstanceInfo

REDIS = "redis://127.0.0.1:6379/0"


def instance(owner: str, jobs: int) -> InstanceInfo:
    """An instance declaring ``jobs`` jobs, all of one definition (``every=60``)."""
    digest = "0f08fc42d38e"
    return InstanceInfo(
        owner, "scheduler", "bench", 1, datetime.now(timezone.utc), "0.2.0", 10.0,
        definitions={f"job-{i:06d}": digest for i in range(jobs)},
        definition_texts={digest: "every 60s"} if jobs else {},
    )  # fmt: skip


def per_beat(store: LeaseBackend, jobs: int, rounds: int = 5, n: int = 10) -> float:
    """Seconds per beat (record, then read every record) with ``jobs`` declared: the best round."""
    fleet = [instance(f"bench-{k}", jobs) for k in range(3)]
    for info in fleet:
        store.record_instance(info, 600)
    mine = fleet[0]

    def beat() -> None:
        store.record_instance(mine, 600)
        store.instances()

    return best(beat, rounds, n)


def best(fn: Callable[[], object], rounds: int, n: int) -> float:
    fn()
    fastest = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        fastest = min(fastest, (time.perf_counter() - start) / n)
    return fastest


def stores(folder: Path, redis_url: str) -> list[tuple[str, Callable[[], LeaseBackend]]]:
    """The stores to measure: a SQLite file, and Redis (a fresh prefix each time)."""

    def sqlite() -> LeaseBackend:
        opened = open_backend(f"sqlite:///{folder / secrets.token_hex(4)}.db?durability=fast")
        assert opened.capability == "lease"
        return opened

    def redis() -> LeaseBackend:
        prefix = f"relay-bench-{secrets.token_hex(4)}:"
        opened = open_backend(f"{redis_url}?strategy=lease&prefix={prefix}")
        assert opened.capability == "lease"
        return opened

    return [("SQLite", sqlite), ("Redis", redis)]


def rows(quick: bool = False, jobs: int = 10_000, redis_url: str = REDIS) -> list[Row]:
    """Per beat with ``jobs`` declared, against the same beat declaring nothing."""
    jobs = 1000 if quick else jobs
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for name, make in stores(Path(folder), redis_url):
            try:
                plain, store = make(), make()
            except BackendUnavailable as exc:
                print(f"  {name} left out: {exc}")
                continue
            try:
                bare, declared = per_beat(plain, 0), per_beat(store, jobs)
            finally:
                plain.close()
                store.close()
            found.append(
                Row("definitions", f"{name}: a beat and a read, 3 instances x {jobs} jobs",
                    declared, "s", bare, "the same beat declaring nothing", "<= 0.1 s",
                    at_most(0.1))
            )  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--url", default=REDIS)
    args = parser.parse_args()
    print(render(rows(jobs=args.jobs, redis_url=args.url)))


if __name__ == "__main__":
    main()
