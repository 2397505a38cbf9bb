"""Several real processes race for the same runs on one claim backend; who won what.

Each process opens the backend from the URL, waits for the others, then claims every run in
slot order, one call per run (the tightest race a store can see).
"""

from __future__ import annotations

import multiprocessing
from collections import Counter
from datetime import datetime, timedelta, timezone
from multiprocessing.synchronize import Barrier
from typing import Any

__all__ = ["race", "slots"]

BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)


def slots(count: int, start: datetime = BASE) -> list[datetime]:
    """``count`` slots a minute apart."""
    return [start + timedelta(minutes=i) for i in range(count)]


def _contender(url: str, job: str, count: int, barrier: Barrier, results: Any) -> None:
    from relay import open_backend

    backend: Any = open_backend(url)
    try:
        barrier.wait(60)
        won = [i for i, slot in enumerate(slots(count)) if backend.claim(job, slot)]
    finally:
        backend.close()
    results.put(won)


def race(url: str, *, processes: int, runs: int, job: str = "race") -> Counter[int]:
    """How many processes won each run (indices of :func:`slots`)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_contender, args=(url, job, runs, barrier, results))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    try:
        wins: Counter[int] = Counter()
        for _ in procs:
            wins.update(results.get(timeout=120))
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert all(proc.exitcode == 0 for proc in procs), [proc.exitcode for proc in procs]
    return wins
