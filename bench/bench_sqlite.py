"""SQLite: acquire + finish per run, against a raw ``BEGIN IMMEDIATE; INSERT; COMMIT`` baseline.

Both run on the same kind of file, in the same process, in the same run, with the same pragmas
(WAL, synchronous=NORMAL). The ratio is what matters; the target is at most 1.5x.

    python bench/bench_sqlite.py [--runs 3000]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from relay import AcquireRequest
from relay.backends.sqlite import SQLiteLeaseBackend

BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)


def raw(path: Path, runs: int) -> float:
    """Seconds for ``runs`` raw transactions: one INSERT each (a claim, and nothing more)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE claims (run_id TEXT PRIMARY KEY, owner TEXT)")
    start = time.perf_counter()
    for n in range(runs):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO claims VALUES (?, ?) ON CONFLICT DO NOTHING", (f"job@{n}", "bench")
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def relay_steps(path: Path, runs: int) -> tuple[float, float]:
    """Seconds for ``runs`` acquires and for ``runs`` finishes through the SQLite lease backend."""
    backend = SQLiteLeaseBackend(path)
    won = []
    start = time.perf_counter()
    for n in range(runs):
        request = AcquireRequest("job", BASE + timedelta(seconds=n), "bench", lease=30)
        won.append(backend.acquire(request).run)
    acquired = time.perf_counter()
    for run in won:
        assert run is not None
        backend.finish(run.id, run.token, succeeded=True)
    finished = time.perf_counter()
    backend.close()
    return acquired - start, finished - acquired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ratios_acquire, ratios_step = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            base = raw(Path(folder) / "raw.db", args.runs)
            acquire, finish = relay_steps(Path(folder) / "relay.db", args.runs)
        ratios_acquire.append(acquire / base)
        ratios_step.append(max(acquire, finish) / base)
        print(
            f"raw insert {base / args.runs * 1e6:7.1f} µs/run   "
            f"acquire {acquire / args.runs * 1e6:7.1f} µs/run   "
            f"finish {finish / args.runs * 1e6:7.1f} µs/run"
        )
    print(
        f"acquire / raw insert (median of {args.repeat}): {statistics.median(ratios_acquire):.2f}x"
    )
    print(
        f"slowest step / raw insert (median): {statistics.median(ratios_step):.2f}x  (target 1.5x)"
    )


if __name__ == "__main__":
    main()
