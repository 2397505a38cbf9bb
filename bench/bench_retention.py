"""Retention keeps a lease store flat: a job every 0.1 s for many retention periods.

A real :class:`relay.Scheduler` on a fresh SQLite file runs a no-op job every 0.1 s with
``retention`` of a few seconds (and a prune every half second, instead of every minute, so that
the run is short). Every second it samples the runs stored and the process's resident memory. The
table must stop growing once the first retention period has passed: the script prints the samples
and the ratio of the largest sample of the second half to that of the first half (target: at most
1.2x; without pruning it would be about 2x and keep growing).

    python bench/bench_retention.py [--seconds 30] [--retention 3]
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

import relay  # noqa: E402


def stored_runs(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(
            conn.execute("SELECT count(*) FROM relay_runs WHERE state != 'job'").fetchone()[0]
        )


def rss_mib() -> float:
    """The process's current resident memory (Linux), else its peak."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--retention", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "relay.db"
        scheduler = relay.Scheduler(
            f"sqlite:///{path}?durability=fast", lease=2, heartbeat=0.25, tick=0.02,
            retention=args.retention,
        )  # fmt: skip
        scheduler.decider.prune_every = 0.5
        scheduler.job(every=0.1, name="often")(lambda run: None)
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()
        samples = []
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < args.seconds:
            time.sleep(1.0)
            samples.append((elapsed, stored_runs(path), rss_mib()))
            print(
                f"t={elapsed:5.1f}s  runs stored {samples[-1][1]:6d}  rss {samples[-1][2]:6.1f} MiB"
            )
        scheduler.stop()
        thread.join(30)
    warm = [s for s in samples if s[0] > args.retention * 2]
    half = len(warm) // 2
    first, second = warm[:half], warm[half:]
    rows = max(s[1] for s in second) / max(1, max(s[1] for s in first))
    memory = max(s[2] for s in second) / max(s[2] for s in first)
    runs = args.seconds / 0.1
    print(f"about {runs:.0f} runs in {args.seconds:g}s, retention {args.retention:g}s "
          f"({args.seconds / args.retention:.0f} retention periods)")  # fmt: skip
    print(
        f"largest second-half sample / first-half: runs stored {rows:.2f}x, rss {memory:.2f}x "
        "(target: <= 1.2x each)"
    )


if __name__ == "__main__":
    main()
