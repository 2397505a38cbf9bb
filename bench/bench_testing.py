"""The test kit's speed: two days of a five-minute job in fake time (tests/testing/test_two_days).

A :class:`relay.Scheduler` on a fresh SQLite store (``durability=fast``, as the ``relay_store``
fixture) with a ``*/5 * * * *`` job in Europe/Paris, driven by a :class:`relay.testing.FakeClock`
for 48 hours across the fall-back night, its run of the second 02:30 failing twice and the job
paused for an hour: 577 slots, 565 runs, 2 retries. The figure is the wall time of the three
``advance`` calls, best of the rounds, against the same runs made by hand in the same run: one
decider tick and one ``Runner.execute`` per slot with the same clock and store (the engine's own
cost, with no loop, no sweeps and no kit). Target: under a second.

    python bench/bench_testing.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "shared"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import relay  # noqa: E402
from bench.table import Row, at_most, render  # noqa: E402
from relay.engine import Decider, Runner  # noqa: E402
from relay.jobs import make_job  # noqa: E402
from relay.testing import FakeClock  # noqa: E402

START = datetime(2026, 10, 24, 0, 0, tzinfo=ZoneInfo("Europe/Paris"))
FAILING = datetime(2026, 10, 25, 1, 30, tzinfo=timezone.utc)


def two_days(folder: Path) -> float:
    """Seconds of wall time for the 48 fake hours of the test."""
    clock = FakeClock(START)
    with clock.installed():
        scheduler = relay.Scheduler(f"sqlite:///{folder}/kit.db?durability=fast", clock=clock)

        @scheduler.job(cron="*/5 * * * *", tz="Europe/Paris", max_attempts=3, name="tick")
        def tick(run: relay.Run) -> None:
            if run.scheduled_for == FAILING and run.attempt < 3:
                raise RuntimeError("fails")

        clock.drive(scheduler)
        began = time.perf_counter()
        clock.advance(hours=30)
        with relay.Control(scheduler.backend) as control:
            control.pause("tick")
            clock.advance(hours=1)
            control.resume("tick")
        clock.advance(hours=17)
        elapsed = time.perf_counter() - began
        scheduler.backend.close()
    return elapsed


def by_hand(folder: Path) -> float:
    """Seconds for one tick and one run per slot, with no loop, sweep or kit."""
    clock = FakeClock(START)
    store = relay.open_backend(f"sqlite:///{folder}/hand.db?durability=fast", clock=clock)
    decider = Decider(store, owner="bench", lease=30, clock=clock)
    decider.add(make_job(store, name="tick", cron="*/5 * * * *", tz="Europe/Paris"))
    runner = Runner(store, owner="bench", lease=30, heartbeat=float("inf"), clock=clock)
    began = time.perf_counter()
    for _ in range(48 * 12 + 1):
        for won in decider.tick():
            runner.execute(won.run, lambda run: None)
        clock.advance(timedelta(minutes=5))
    elapsed = time.perf_counter() - began
    store.close()
    return elapsed


def rows(quick: bool = False, repeat: int = 5) -> list[Row]:
    """The kit's two days, best of ``repeat`` rounds, against the same runs by hand."""
    logging.getLogger("relay").setLevel(logging.CRITICAL)  # the two failed attempts
    kit, hand = [], []
    for _ in range(1 if quick else repeat):
        with tempfile.TemporaryDirectory() as folder:
            kit.append(two_days(Path(folder)))
            hand.append(by_hand(Path(folder)))
    return [
        Row("testing", "48 fake hours, */5 job (577 slots)", min(kit), "s", min(hand),
            "one tick + one run per slot by hand", "<= 1 s", at_most(1.0)),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(render(rows(repeat=args.repeat)))


if __name__ == "__main__":
    main()
