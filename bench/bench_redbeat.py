"""Relay's beat against celery-redbeat with the same entries, both storing in Redis.

For ``E`` entries (default 10,000; ``every`` 1 h, so none is due while measured), each scheduler
is built on a fresh key prefix and timed: start-up (construction, which loads or stores every
entry, plus the first tick) and the tick as ``celery beat`` calls it when nothing is due (median
of 200). celery-redbeat is a benchmark-only dependency: ``pip install -e '.[bench]'``.

    python bench/bench_redbeat.py [--entries 10000]
"""

from __future__ import annotations

import argparse
import itertools
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.stores import REDIS, delete_prefix  # noqa: E402
from bench.table import Row  # noqa: E402

_APPS = itertools.count()


def make_app(entries: int, **conf: Any) -> Any:
    """A Celery app (broker ``memory://``) with ``entries`` hourly entries of one task."""
    from celery import Celery

    app = Celery(f"bench_redbeat{next(_APPS)}", broker="memory://")

    @app.task(name="bench.noop", shared=False)
    def noop() -> None:
        pass

    schedule = {f"e{i:06d}": {"task": "bench.noop", "schedule": 3600.0} for i in range(entries)}
    app.conf.update(beat_schedule=schedule, **conf)
    return app


def redbeat(entries: int, prefix: str) -> Any:
    """A RedBeatScheduler with the entries, keys under ``prefix``."""
    from redbeat import RedBeatScheduler

    # No beat lock: it is taken by the beat service at start, not by a scheduler object.
    app = make_app(
        entries, redbeat_redis_url=REDIS, redbeat_key_prefix=prefix, redbeat_lock_key=None
    )
    return RedBeatScheduler(app)


def relay(entries: int, prefix: str) -> Any:
    """Relay's RelayScheduler with the entries, on a Redis store under ``prefix``."""
    from relay_celery import RelayScheduler, install

    app = make_app(entries, relay_backend=f"{REDIS}?prefix={prefix}")
    install(app)
    return RelayScheduler(app)


def start_up(build: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds to build a scheduler and tick it once."""
    began = time.perf_counter()
    scheduler = build()
    scheduler.tick()
    return time.perf_counter() - began, scheduler


def idle_tick(scheduler: Any, times: int = 200) -> float:
    """Median seconds of ``tick()`` with nothing due."""
    samples = []
    for _ in range(times):
        began = time.perf_counter()
        scheduler.tick()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def measure(entries: int) -> dict[str, float]:
    """Start-up and idle tick of both schedulers (and a restart: the entries already stored)."""
    found: dict[str, float] = {}
    for name, build in (("redbeat", redbeat), ("relay", relay)):
        prefix = f"relay_bench_{secrets.token_hex(4)}:"
        try:
            found[f"{name} start"], scheduler = start_up(lambda b=build, p=prefix: b(entries, p))  # type: ignore[misc]
            found[f"{name} tick"] = idle_tick(scheduler)
            if hasattr(scheduler, "close"):
                scheduler.close()
            found[f"{name} restart"], scheduler = start_up(lambda b=build, p=prefix: b(entries, p))  # type: ignore[misc]
            if hasattr(scheduler, "close"):
                scheduler.close()
        finally:
            delete_prefix(prefix)
    return found


def rows(quick: bool = False) -> list[Row]:
    """Rows: Relay's beat against redbeat (ratio above 1: Relay is slower)."""
    entries = 1000 if quick else 10_000
    found = measure(entries)
    n = f"{entries:,} entries"
    return [
        Row("redbeat", f"beat start-up + first tick, {n}, empty store", found["relay start"], "s",
            found["redbeat start"], "redbeat"),
        Row("redbeat", f"beat restart + first tick, {n} stored", found["relay restart"], "s",
            found["redbeat restart"], "redbeat"),
        Row("redbeat", f"beat tick, nothing due, {n}", found["relay tick"] * 1e6, "µs",
            found["redbeat tick"] * 1e6, "redbeat"),
    ]  # fmt: skip


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    for name, value in measure(args.entries).items():
        print(f"{name:<16} {value * 1e3:10.3f} ms")


if __name__ == "__main__":
    main()
