"""Soak: a job every 0.1 s plus 10,000 idle jobs; store size and instance memory over time.

One standalone instance runs on a SQLite file and, separately, on a PostgreSQL schema. Every
``--every`` seconds the benchmark samples the instance's resident memory, the store's size (SQLite:
its pages as a reader sees them, write-ahead log included; PostgreSQL: the runs table with its
indexes) and the number of runs recorded. Targets (issue 17): both flat once retention applies
(``retention=`` on the scheduler, when this Relay has it; otherwise the growth per hour).

    python bench/bench_soak.py [--seconds 300] [--every 30] [--idle 10000] [--retention 60]

``--seconds 7200`` for the full-length soak (hours).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row  # noqa: E402

POSTGRES = os.environ.get("RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def rss(pid: int) -> int:
    """Resident bytes of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def store(name: str) -> Iterator[tuple[str, object]]:
    """A fresh store: its URL and a function giving (bytes, runs recorded)."""
    if name == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "relay.db"

            def size() -> tuple[int, int]:
                import sqlite3

                # The database's pages as a reader sees them (WAL included), not the files: the WAL
                # file is reused after each checkpoint, the database file lags behind it.
                with sqlite3.connect(path) as conn:
                    (pages,) = conn.execute("PRAGMA page_count").fetchone()
                    (size,) = conn.execute("PRAGMA page_size").fetchone()
                    (count,) = conn.execute("SELECT count(*) FROM relay_runs").fetchone()
                return int(pages) * int(size), int(count)

            yield f"sqlite:///{path}", size
    else:
        import psycopg

        schema = f"relay_bench_{secrets.token_hex(4)}"

        def pg_size() -> tuple[int, int]:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                row = conn.execute(
                    f"SELECT pg_total_relation_size('\"{schema}\".runs'), "
                    f'(SELECT count(*) FROM "{schema}".runs)'
                ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        try:
            yield f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={schema}", pg_size
        finally:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def soak(name: str, seconds: float, every: float, idle: int, retention: float) -> list[Row]:
    """Run one instance for ``seconds``; rows for memory and store growth."""
    with store(name) as (url, size):
        args = {"url": url, "idle": idle, "retention": retention}
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.soak_instance", json.dumps(args)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        with_retention = proc.stdout.readline().strip() == "True"
        time.sleep(min(10.0, seconds / 4))  # past start-up and the first ticks
        samples = []
        started = time.monotonic()
        try:
            while True:
                elapsed = time.monotonic() - started
                samples.append((elapsed, rss(proc.pid), *size()))  # type: ignore[operator]
                print(f"{name} t={elapsed:5.0f}s rss={samples[-1][1] / 2**20:.1f} MiB "
                      f"store={samples[-1][2] / 2**20:.2f} MiB runs={samples[-1][3]}",
                      file=sys.stderr, flush=True)  # fmt: skip
                if elapsed >= seconds:
                    break
                time.sleep(every)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    (t0, rss0, bytes0, runs0), (t1, rss1, bytes1, runs1) = samples[0], samples[-1]
    hours = (t1 - t0) / 3600
    note = f"retention {retention:g} s" if with_retention else "no retention (not in this Relay)"
    span = f"{t1 - t0:.0f} s, {idle:,} idle jobs + 1 every 0.1 s, {note}"
    return [
        Row("soak", f"{name}: instance memory growth ({span}; {rss0 / 2**20:.1f} MiB at start)",
            (rss1 - rss0) / 2**20 / hours, "MiB/h"),
        Row("soak", f"{name}: store growth ({span}; {bytes0 / 2**20:.2f} MiB at start)",
            (bytes1 - bytes0) / 2**20 / hours, "MiB/h"),
        Row("soak", f"{name}: runs recorded ({span})", (runs1 - runs0) / hours, "/h"),
    ]  # fmt: skip


def rows(quick: bool = False) -> list[Row]:
    """Rows for SQLite and PostgreSQL (``quick``: 60 s each instead of 300 s)."""
    seconds, every = (60.0, 15.0) if quick else (300.0, 30.0)
    return [
        row for name in ("sqlite", "postgres") for row in soak(name, seconds, every, 10_000, 60)
    ]


def main() -> None:
    """Run the soak on the chosen stores."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--retention", type=float, default=60.0)
    parser.add_argument("--only", nargs="*", choices=["sqlite", "postgres"],
                        default=["sqlite", "postgres"])  # fmt: skip
    args = parser.parse_args()
    for name in args.only:
        for row in soak(name, args.seconds, args.every, args.idle, args.retention):
            print(f"{row.figure}: {row.value:.3g} {row.unit}")


if __name__ == "__main__":
    main()
