"""Which of 100,000 jobs are overdue or failing (:mod:`relay.overdue`): time and store calls.

Each store gets ``--jobs`` registered jobs (every 60 s, a tenth of them cron, a tenth with
``alert_after_failures``), each with three runs: two missed slots and a run still running; one
job in ten also a success before them. Then, timed in the same process:

* decision: :func:`relay.overdue.read_health` over every job (what ``relay overdue`` does),
  with the store calls it made counted;
* raw read: the same reads with no decision: ``jobs()`` and ``job_history`` of every job in
  the same batches, the baseline;
* one job at a time: ``runs(job)`` per job (how ``relay jobs`` reads), calls counted, on a
  tenth of the jobs and scaled up (it is the slow way).

    python bench/bench_overdue.py [--jobs 100000] [--stores sqlite,postgres,redis]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "shared"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.stores import store  # noqa: E402
from bench.table import Row, at_most, ratio_at_most  # noqa: E402
from relay import AcquireRequest, LeaseBackend, open_backend  # noqa: E402
from relay.contract import reads_history  # noqa: E402
from relay.overdue import BATCH, DEPTH, read_health  # noqa: E402

UTC = timezone.utc
STORES = ("sqlite", "postgres", "redis")
CHUNK = 1000


class Counting:
    """A lease backend that counts the calls made to it."""

    def __init__(self, backend: LeaseBackend) -> None:
        self._backend = backend
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._backend, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return found(*args, **kwargs)

        return counted


def spec(n: int) -> str:
    if n % 10 == 1:
        return json.dumps({"cron": "*/5 * * * *", "tz": "Europe/Paris", "schedule": "cron"})
    values: dict[str, Any] = {"every": 60.0, "schedule": "every 60s"}
    if n % 10 == 2:
        values["alert_after_failures"] = 2
    return json.dumps(values)


def fill(backend: LeaseBackend, jobs: int) -> None:
    """Register ``jobs`` jobs and give each its runs, in batches."""
    names = [f"job-{n:06d}" for n in range(jobs)]
    now = backend.now().replace(second=0, microsecond=0)
    for at in range(0, jobs, CHUNK):
        part = names[at : at + CHUNK]
        backend.register_jobs({name: spec(at + i) for i, name in enumerate(part)})
        won = backend.acquire_many(
            [AcquireRequest(n, now - timedelta(minutes=3), "bench", 600) for n in part[::10]]
        )
        for result in won:
            assert result.run is not None
            backend.start(result.run.id, result.run.token, "bench", 600)
            backend.finish(result.run.id, result.run.token, succeeded=True)
        for minutes in (2, 1):
            backend.skip_many([(n, now - timedelta(minutes=minutes)) for n in part], "missed")
        backend.acquire_many([AcquireRequest(n, now, "bench", 600) for n in part])


def raw(backend: LeaseBackend) -> int:
    names = [info.name for info in backend.jobs()]
    read = 0
    for at in range(0, len(names), BATCH):
        if reads_history(backend):
            read += len(backend.job_history(names[at : at + BATCH], DEPTH))
    return read


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def measure(name: str, jobs: int) -> list[Row]:
    with store(name) as url:
        backend = open_backend(url)
        assert isinstance(backend, LeaseBackend)
        try:
            fill(backend, jobs)
            counting = Counting(backend)
            seconds, found = timed(lambda: read_health(counting))
            assert len(found) == jobs
            raw_seconds, read = timed(lambda: raw(backend))
            assert read == jobs
            sample = [f"job-{n:06d}" for n in range(0, jobs, 10)]
            one = Counting(backend)
            per_job, _ = timed(lambda: [one.runs(job, 20) for job in sample])
        finally:
            backend.close()
    calls_allowed = 3 + math.ceil(jobs / BATCH)
    label = f"overdue ({name}, {jobs:,} jobs)"
    return [
        Row(label, "decision time", seconds, "s", raw_seconds, "raw read", "<= 3x",
            ratio_at_most(3.0)),
        Row(label, "decision store calls", counting.calls, "calls", one.calls * 10,
            "runs() per job", f"<= {calls_allowed}", at_most(calls_allowed)),
        Row(label, "one job at a time", per_job * 10, "s", seconds, "decision"),
    ]  # fmt: skip


def rows(quick: bool = False) -> list[Row]:
    """The table's rows: 10,000 jobs with ``quick``, else 100,000."""
    found: list[Row] = []
    for name in STORES:
        found += measure(name, 10_000 if quick else 100_000)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--stores", default=",".join(STORES))
    args = parser.parse_args()
    from bench.table import render

    found: list[Row] = []
    for name in args.stores.split(","):
        found += measure(name, args.jobs)
    print(render(found))


if __name__ == "__main__":
    main()
