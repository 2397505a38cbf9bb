"""Benchmark what events cost: the same work with events logged as JSON, and with no subscriber.

Usage: ``python bench/bench_events.py [-n N] [--jobs J]``.

1. **A run** on a SQLite store in a temporary folder (``durability="fast"``: an fsync per step
   would drown the difference in noise): decide (acquire), start, call an empty handler, finish.
   It emits won, started and succeeded.
2. **An idle step** of the engine's loop with ``J`` jobs (default 200) and nothing due: no store
   call, no event.
3. **A decided slot lost** to another instance: one acquire answered HELD and one ``lost``
   (DEBUG: built, then dropped by the logger's level).

"off" is a bus with no subscriber. "on" is the default bus, which logs each event on
``relay.events.<type>``, measured twice: with ``relay.events`` at WARNING (Python's default level:
events are built and emitted, INFO ones not written), and with every INFO event written as JSON
by python-json-logger to an in-memory stream, as a JSON log pipeline would. Each ratio on / off is
printed; the target is at most 1.05. Writing log lines costs what the logging library costs.
"""

from __future__ import annotations

import argparse
import io
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider, Loop, Runner
from relay.events import EventBus
from relay.jobs import make_job


def per_call(fn: Callable[[], Any], n: int, rounds: int = 5) -> float:
    """Seconds per call of ``fn``: the best of ``rounds`` rounds of ``n // rounds`` calls."""
    for _ in range(min(n, 20)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n // rounds):
            fn()
        best = min(best, (time.perf_counter() - start) / (n // rounds))
    return best


def report(name: str, on: float, off: float) -> None:
    print(f"  {name:<40} off {off * 1e6:9.1f} µs   on {on * 1e6:9.1f} µs   ratio {on / off:5.3f}")


class Clock:
    """Seconds since the epoch, moved one minute per call of :meth:`next_slot`."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def next_slot(self) -> None:
        self.now += 60


def one_run(folder: Path, log: bool) -> Callable[[], None]:
    """A function doing one whole run of a job due every minute (the clock moves a minute)."""
    clock = Clock()
    store = SQLiteLeaseBackend(
        folder / f"run-{log}-{time.monotonic_ns()}.db", clock=clock, durability="fast"
    )
    bus = EventBus(log=log)
    decider = Decider(store, owner="bench", lease=30, clock=clock, events=bus)
    decider.add(make_job(store, name="job", every=60))
    runner = Runner(store, owner="bench", lease=30, heartbeat=3600, events=bus, clock=clock)

    def run() -> None:
        clock.next_slot()
        for won in decider.tick():
            runner.execute(won.run, lambda run: None, max_attempts=3)

    return run


def idle_step(folder: Path, jobs: int, log: bool) -> Callable[[], None]:
    clock = Clock()
    store = SQLiteLeaseBackend(
        folder / f"idle-{log}-{time.monotonic_ns()}.db", clock=clock, durability="fast"
    )
    decider = Decider(store, owner="bench", lease=30, clock=clock, events=EventBus(log=log))
    for i in range(jobs):
        decider.add(make_job(store, name=f"job{i}", every=3600))
    loop = Loop(decider, interval=1, sweep_every=10**9, monotonic=clock)
    loop.step(lambda won: True)

    def step() -> None:
        loop.step(lambda won: True)

    return step


def lost_slot(folder: Path, log: bool) -> Callable[[], None]:
    clock = Clock()
    store = SQLiteLeaseBackend(
        folder / f"lost-{log}-{time.monotonic_ns()}.db", clock=clock, durability="fast"
    )
    winner = Decider(store, owner="winner", lease=30, clock=clock, events=EventBus(log=False))
    loser = Decider(store, owner="loser", lease=30, clock=clock, events=EventBus(log=log))
    for decider in (winner, loser):
        decider.add(make_job(store, name="job", every=60))

    def lose() -> None:
        clock.next_slot()
        winner.tick()
        loser.tick()

    return lose


def json_logging(level: int) -> None:
    """Send ``relay.events`` to a JSON formatter on an in-memory stream, at ``level``."""
    logger = logging.getLogger("relay.events")
    if not logger.handlers:
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level)


def compare(name: str, make: Callable[[bool], Callable[[], None]], n: int) -> None:
    """Measure off and on in turn, three times each; the best of each (a shared machine)."""
    off_work, on_work = make(False), make(True)
    offs, ons = [], []
    for _ in range(3):
        offs.append(per_call(off_work, n))
        ons.append(per_call(on_work, n))
    report(name, min(ons), min(offs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"events on / off (no subscriber), SQLite store in {folder}")
        for level in (logging.WARNING, logging.INFO):
            json_logging(level)
            print(f"relay.events at {logging.getLevelName(level)}:")
            compare("a run: won, started, succeeded", lambda log: one_run(folder, log), args.n)
            compare(
                f"an idle loop step, {args.jobs} jobs",
                lambda log: idle_step(folder, args.jobs, log),
                args.n * 10,
            )
            compare(
                "a slot lost (DEBUG: never written)", lambda log: lost_slot(folder, log), args.n
            )


if __name__ == "__main__":
    main()
