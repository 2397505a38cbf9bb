"""Benchmark what an ``async def`` handler costs a run, against a plain one, in the same process.

Usage: ``python bench/bench_async.py [-n N]``.

A whole run on a SQLite store in a temporary folder (``durability="fast"``, so the store's fsync
does not drown the difference): decide (acquire), start, call the handler, finish. The handler
does nothing; it is

* **plain**: ``def``, called in the run's thread (the baseline);
* **own loop**: ``async def`` under ``Scheduler.run()``: a new event loop for the run
  (``asyncio.run``), with the task that watches ``Run.lost``;
* **app loop**: ``async def`` under ``await Scheduler.serve()``: a task of an event loop running
  in another thread, the run's thread waiting for it.

Each figure is the best of three rounds' per-run time. The design choice it informs: one loop per
run costs a fraction of a millisecond, far below a run's store round trips on a networked store,
so the standalone scheduler keeps no event loop of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.table import Row
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider, Runner
from relay.engine.coroutines import call_handler
from relay.events import EventBus
from relay.jobs import make_job
from relay.runs import Run


def plain(run: Run) -> None:
    return None


async def coroutine(run: Run) -> None:
    return None


def one_run(
    path: Path, handler: Callable[[Run], Any], loop: asyncio.AbstractEventLoop | None
) -> Callable[[], None]:
    """A function doing one whole run of a job due every minute (the clock moves a minute)."""
    now = [1_800_000_000.0]
    store = SQLiteLeaseBackend(path, clock=lambda: now[0], durability="fast")
    bus = EventBus(log=False)
    decider = Decider(store, owner="bench", lease=30, clock=lambda: now[0], events=bus)
    decider.add(make_job(store, name="job", every=60))
    runner = Runner(store, owner="bench", lease=30, heartbeat=3600, events=bus)

    def run() -> None:
        now[0] += 60
        for won in decider.tick():
            runner.execute(won.run, lambda r: call_handler(handler, r, loop), max_attempts=3)

    return run


def per_run(work: Callable[[], None], n: int) -> float:
    """Seconds per run: the best of three rounds of ``n`` runs, after a warm-up."""
    for _ in range(min(n, 50)):
        work()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            work()
        best = min(best, (time.perf_counter() - start) / n)
    return best


def measure(n: int) -> dict[str, float]:
    """Microseconds per run for each kind of handler."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            kinds = {
                "plain": one_run(folder / "plain.db", plain, None),
                "own loop": one_run(folder / "own.db", coroutine, None),
                "app loop": one_run(folder / "app.db", coroutine, loop),
            }
            return {name: per_run(work, n) * 1e6 for name, work in kinds.items()}
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def added_at_most(limit: float) -> Callable[[float, float | None], bool]:
    """Target: the value exceeds its baseline by at most ``limit`` (its unit)."""
    return lambda value, ratio: ratio is not None and value - value / ratio <= limit


def rows(quick: bool = False) -> list[Row]:
    """Each async way against the plain handler; target: at most 1 ms added to a run."""
    figures = measure(200 if quick else 1000)
    return [
        Row(
            "async",
            f"a run, async def handler ({name})",
            figures[name],
            "µs",
            figures["plain"],
            "plain handler",
            "<= 1 ms added",
            added_at_most(1000.0),
        )
        for name in ("own loop", "app loop")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000)
    args = parser.parse_args()
    figures = measure(args.n)
    for name, value in figures.items():
        print(f"  {name:<10} {value:9.1f} µs a run   {value / figures['plain']:5.2f}x plain")


if __name__ == "__main__":
    main()
