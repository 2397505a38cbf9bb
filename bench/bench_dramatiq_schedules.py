"""Stored schedules on relay-dramatiq: how soon three real schedulers see an edit.

Three ``relay-dramatiq`` processes (``bench/dramatiq_schedules_app.py``, the default tick of 1 s)
on one store; 100 edits of one stored schedule, a random 0.05 to 0.5 s apart. For each edit and
scheduler, the time from the edit's return to the scheduler applying it (or a later version): p50
and p99. Target: p99 within a tick (1 s) plus a round trip (0.25 s on a loaded machine).

    python bench/bench_dramatiq_schedules.py [--only sqlite postgres redis] [--edits 100]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.bench_schedules import WEEK, _seen, _wait  # noqa: E402
from bench.stores import store  # noqa: E402
from bench.table import Row, at_most  # noqa: E402

EDITS = 100
SCHEDULERS = 3
TICK = 1.0
"""relay-dramatiq's default tick (``RelayMiddleware(tick=None)``)."""


def visibility(name: str, edits: int = EDITS) -> list[Row]:
    """p50 and p99 of edit-to-applied over ``edits`` edits and three schedulers."""
    from relay import Control

    with store(name) as url, tempfile.TemporaryDirectory() as folder:
        logs = [Path(folder) / f"scheduler{n}.log" for n in range(SCHEDULERS)]
        procs = []
        for log in logs:
            env = {**os.environ, "RELAY_B_BACKEND": url, "RELAY_B_LOG": str(log),
                   "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}  # fmt: skip
            command = [sys.executable, "-m", "relay_dramatiq", "bench.dramatiq_schedules_app",
                       "--log-level", "WARNING"]  # fmt: skip
            procs.append(subprocess.Popen(command, cwd=ROOT, env=env))
        try:
            with Control(url) as control:
                _wait(lambda: len(control.allowed_tasks()) == SCHEDULERS, 60)
                control.add_schedule("edited", "echo", every=WEEK)
                _wait(lambda: all(_seen(log) for log in logs), 30)
                done: dict[int, float] = {}
                for version in range(1, edits + 1):
                    time.sleep(random.uniform(0.05, 0.5))
                    control.update_schedule("edited", version=version, description=str(version))
                    done[version + 1] = time.time()
                _wait(lambda: all(max(_seen(log)) >= edits + 1 for log in logs), 30)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
        delays = []
        for log in logs:
            seen = _seen(log)
            for version, at in done.items():
                delays.append(min(t for v, t in seen.items() if v >= version) - at)
    delays.sort()
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    target = TICK + 0.25
    return [
        Row(f"dramatiq schedules {name}", f"edit seen by a scheduler, p99 ({edits} edits x "
            f"{SCHEDULERS} schedulers)", p99, "s", target=f"<= {target:g} s",
            check=at_most(target)),
        Row(f"dramatiq schedules {name}", "edit seen by a scheduler, p50",
            statistics.median(delays), "s"),
    ]  # fmt: skip


def rows(quick: bool = False) -> list[Row]:
    """Visibility on SQLite and Redis (PostgreSQL too unless quick)."""
    names = ("sqlite", "redis") if quick else ("sqlite", "postgres", "redis")
    return [row for name in names for row in visibility(name, 30 if quick else EDITS)]


def main() -> None:
    """Run the chosen stores and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=["sqlite", "postgres", "redis"],
                        choices=["sqlite", "postgres", "redis", "nats_kv"])  # fmt: skip
    parser.add_argument("--edits", type=int, default=EDITS)
    args = parser.parse_args()
    for name in args.only:
        for row in visibility(name, args.edits):
            print(f"{row.bench:28} {row.figure:56} {row.value:10.4g} {row.unit}")


if __name__ == "__main__":
    main()
