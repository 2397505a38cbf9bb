"""SQLite: acquire, start and finish per run, against a raw ``BEGIN IMMEDIATE; INSERT; COMMIT``.

The raw baseline writes to a two-column table in the same database file as Relay's, through its
own connection with the same pragmas: WAL, and the ``synchronous`` setting the backend's acquire,
start and finish commit with (``FULL`` for ``--durability full``, the default, so both wait for
the disk alike; ``NORMAL`` for ``--durability fast``). The steps are interleaved (a raw insert, an
acquire, a raw insert, a start, a raw insert, a finish, and again), so a busy machine slows both
alike, and each is timed call by call; medians are printed. Target: each step at most 1.5x the
raw insert.

    python bench/bench_sqlite.py [--runs 5000] [--repeat 3] [--jobs 1] [--durability full]

``--jobs N`` spreads the runs over N jobs (run n belongs to job n mod N).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, ratio_at_most  # noqa: E402
from relay import AcquireRequest  # noqa: E402
from relay.backends.sqlite import DURABILITY, Durability, SQLiteLeaseBackend  # noqa: E402

BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)


class RawInserts:
    """The baseline: one transaction per claim, inserting its id, and nothing more."""

    def __init__(self, path: Path, durability: Durability) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        self.conn.execute("CREATE TABLE bench_raw (run_id TEXT PRIMARY KEY, owner TEXT)")
        self.count = 0

    def insert(self) -> None:
        self.count += 1
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "INSERT INTO bench_raw VALUES (?, ?) ON CONFLICT DO NOTHING",
            (f"job@{self.count}", "bench"),
        )
        self.conn.execute("COMMIT")


def one_round(path: Path, runs: int, jobs: int, durability: Durability) -> dict[str, float]:
    """Median microseconds per call of a raw insert, an acquire, a start and a finish."""
    backend = SQLiteLeaseBackend(path, durability=durability)
    raw = RawInserts(path, durability)
    requests = [
        AcquireRequest(f"job{n % jobs}", BASE + timedelta(seconds=n), "bench", lease=30)
        for n in range(runs)
    ]
    timings: dict[str, list[float]] = {"raw insert": [], "acquire": [], "start": [], "finish": []}
    clock = time.perf_counter
    for request in requests:
        start = clock()
        raw.insert()
        timings["raw insert"].append(clock() - start)
        start = clock()
        run = backend.acquire(request).run
        timings["acquire"].append(clock() - start)
        assert run is not None
        start = clock()
        raw.insert()
        timings["raw insert"].append(clock() - start)
        start = clock()
        backend.start(run.id, run.token, "bench", 30)
        timings["start"].append(clock() - start)
        start = clock()
        raw.insert()
        timings["raw insert"].append(clock() - start)
        start = clock()
        backend.finish(run.id, run.token, succeeded=True)
        timings["finish"].append(clock() - start)
    raw.conn.close()
    backend.close()
    return {step: statistics.median(values) * 1e6 for step, values in timings.items()}


def rows(quick: bool = False) -> list[Row]:
    """The table rows: each step's median against the raw insert, best of the rounds' medians."""
    runs, repeat = (1000, 1) if quick else (5000, 3)
    rounds = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as folder:
            rounds.append(one_round(Path(folder) / "relay.db", runs, 1, "full"))
    raw = statistics.median(r["raw insert"] for r in rounds)
    return [
        Row(
            "sqlite",
            f"{step} (durability full)",
            statistics.median(r[step] for r in rounds),
            "µs",
            raw,
            "raw insert",
            "<= 1.5x",
            ratio_at_most(1.5),
        )
        for step in ("acquire", "start", "finish")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--durability", choices=list(DURABILITY), default="full")
    args = parser.parse_args()
    print(f"durability={args.durability}: synchronous={DURABILITY[args.durability]} on both sides")
    ratios: dict[str, list[float]] = {
        "acquire": [], "start": [], "finish": [], "acquire + finish": []
    }  # fmt: skip
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            micros = one_round(Path(folder) / "relay.db", args.runs, args.jobs, args.durability)
        raw = micros["raw insert"]
        ratios["acquire"].append(micros["acquire"] / raw)
        ratios["start"].append(micros["start"] / raw)
        ratios["finish"].append(micros["finish"] / raw)
        ratios["acquire + finish"].append((micros["acquire"] + micros["finish"]) / (2 * raw))
        print(
            f"raw insert {raw:6.1f} µs   acquire {micros['acquire']:6.1f} µs   "
            f"start {micros['start']:6.1f} µs   finish {micros['finish']:6.1f} µs   "
            f"(medians of {args.runs} calls each)"
        )
    print(f"median of {args.repeat} rounds, against the raw insert (target: each step <= 1.5x):")
    for step, values in ratios.items():
        per = " per step" if step == "acquire + finish" else ""
        print(f"  {step:<17} {statistics.median(values):.2f}x{per}")


if __name__ == "__main__":
    main()
