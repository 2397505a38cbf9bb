"""The web console on a big store: each page's answer time at the server, against the raw reads.

A store gets ``--jobs`` jobs (registered as their schedulers would) and ``--runs`` runs over them:
most recorded in batches (``skip_many``, the cheapest real record), and a few thousand leased,
started and finished (some failed) so the pages have outcomes to show. Then each page is asked
``--repeat`` times through Starlette's test client, in process (no network, no browser: the
server's time), and the median is printed beside two raw reads of the same store measured in the
same run: ``jobs()`` (every job, what the jobs page must list) and ``runs(None, 50)``.

    python bench/bench_console.py [--store sqlite|postgres|redis] [--jobs 100000]
                                  [--runs 1000000] [--repeat 5]

Target: every page under 200 ms at the server.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.stores import store  # noqa: E402
from bench.table import Row, at_most  # noqa: E402
from relay import AcquireRequest, open_backend  # noqa: E402
from relay.contract import LeaseBackend, is_lease  # noqa: E402

TARGET_MS = 200.0
BATCH = 10_000
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def fill(url: str, jobs: int, runs: int, leased: int = 2000) -> tuple[float, str]:
    """Register ``jobs`` jobs and record ``runs`` runs; seconds taken, and one leased run's id."""
    backend = open_backend(url)
    assert is_lease(backend)
    started = time.perf_counter()
    spec = json.dumps({"every": 60, "schedule": "every 60s", "overlap": "allow"})
    names = [f"job-{n:06d}" for n in range(jobs)]
    for i in range(0, jobs, BATCH):
        backend.register_jobs({name: spec for name in names[i : i + BATCH]})
    per_job = max(1, runs // jobs)
    pairs = ((names[n % jobs], T0 + timedelta(minutes=n // jobs)) for n in range(runs - leased))
    batch: list[tuple[str, datetime]] = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) >= BATCH:
            backend.skip_many(batch, "missed")
            batch = []
    if batch:
        backend.skip_many(batch, "missed")
    last = ""
    for n in range(leased):  # real outcomes, after the skipped slots of the first 20 jobs
        job, slot = names[n % 20], T0 + timedelta(minutes=per_job + n)
        won = backend.acquire(AcquireRequest(job, slot, "bench:1", 30)).run
        assert won is not None
        backend.start(won.id, won.token, won.owner, 30)
        backend.finish(won.id, won.token, succeeded=n % 13 != 0, error="boom")
        last = won.id
    backend.close()
    return time.perf_counter() - started, last


def median_ms(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def pages(run_id: str, jobs: int) -> dict[str, str]:
    """Each page the benchmark asks, by what it shows."""
    from urllib.parse import quote

    middle = f"job-{jobs // 2:06d}"
    return {
        "jobs, first page": "/",
        "jobs, a middle page": f"/?after={middle}",
        "jobs, names starting with a prefix": f"/?q={middle[:-2]}",
        "one job (status, next runs, latest runs)": f"/jobs/{middle}",
        "runs, every job": "/runs",
        "runs, one job": "/runs?job=job-000001",
        "runs, failed only": "/runs?state=failed",
        "runs, one job since a time": "/runs?job=job-000001&since=2026-11-01T00:00:00Z",
        "one run's story": f"/run/{quote(run_id, safe='')}",
        "instances": "/instances",
        "stored schedules": "/schedules",
        "timeline, one job": "/timeline?job=job-000001",
        "jobs, live part unchanged (304)": "/?fragment=1",
    }


def measure(name: str, jobs: int, runs: int, repeat: int) -> list[Row]:
    """Fill a fresh store of kind ``name``, then time each page and the raw reads."""
    from starlette.testclient import TestClient

    from relay.console import asgi_app

    rows = []
    with store(name) as url:
        seconds, run_id = fill(url, jobs, runs)
        print(f"{name}: {jobs} jobs and {runs} runs recorded in {seconds:.0f} s", flush=True)
        backend = open_backend(url, read_only=True)
        assert isinstance(backend, LeaseBackend) or is_lease(backend)
        raw_jobs = median_ms(backend.jobs, repeat)
        raw_runs = median_ms(lambda: backend.runs(None, 50), repeat)
        backend.close()
        app = asgi_app(url)
        client = TestClient(app, client=("127.0.0.1", 1))
        for figure, path in pages(run_id, jobs).items():
            headers = {}
            if "(304)" in figure:
                headers["If-None-Match"] = client.get(path).headers["etag"]
            answer = client.get(path, headers=headers)
            assert answer.status_code in (200, 304), (path, answer.status_code)
            assert "flash error" not in answer.text, (path, answer.text[:2000])
            ms = median_ms(lambda: client.get(path, headers=headers), repeat)  # noqa: B023
            rows.append(
                Row(f"console-{name}", f"{figure} ({jobs:,} jobs, {runs:,} runs)", ms, "ms",
                    raw_jobs, "store.jobs() alone", f"<= {TARGET_MS:g} ms", at_most(TARGET_MS))
            )  # fmt: skip
        rows.append(Row(f"console-{name}", "raw runs(None, 50)", raw_runs, "ms"))
        app.state.console.close()
    return rows


def rows(quick: bool = False) -> list[Row]:
    """Every page on SQLite (and PostgreSQL, Redis when they answer)."""
    jobs, runs = (10_000, 100_000) if quick else (100_000, 1_000_000)
    return measure("sqlite", jobs, runs, 3 if quick else 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="sqlite", choices=["sqlite", "postgres", "redis"])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for row in measure(args.store, args.jobs, args.runs, args.repeat):
        met = "" if row.met is None else ("  ok" if row.met else "  OVER TARGET")
        print(f"{row.figure:75} {row.value:9.1f} {row.unit}{met}")


if __name__ == "__main__":
    main()
