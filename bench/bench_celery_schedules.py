"""Stored schedules on Celery beat: how soon three real ``celery beat`` processes see an edit.

Three ``celery beat`` processes (``bench/celery_schedules_app.py``, ``beat_max_loop_interval``
300 s: Celery's own default) on one store; 100 edits of one stored schedule, a random 0.05 to
0.5 s apart. For each edit and beat, the time from the edit's return to the beat applying it (or
a later version): p50 and p99. Target: p99 within a beat's stored-schedule step
(``relay_celery.beat.STORED_TICK``, 1 s) plus a round trip (0.25 s on a loaded machine).

    python bench/bench_celery_schedules.py [--only sqlite postgres redis] [--edits 100]
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
from relay_celery.beat import STORED_TICK  # noqa: E402

EDITS = 100
BEATS = 3


def visibility(name: str, edits: int = EDITS) -> list[Row]:
    """p50 and p99 of edit-to-applied over ``edits`` edits and three beats."""
    from relay import Control

    with store(name) as url, tempfile.TemporaryDirectory() as folder:
        logs = [Path(folder) / f"beat{n}.log" for n in range(BEATS)]
        procs = []
        for n, log in enumerate(logs):
            env = {**os.environ, "RELAY_B_BACKEND": url, "RELAY_B_LOG": str(log),
                   "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}  # fmt: skip
            command = [sys.executable, "-m", "celery", "-A", "bench.celery_schedules_app", "beat",
                       "-s", str(Path(folder) / f"beat{n}"), "-l", "WARNING"]  # fmt: skip
            procs.append(subprocess.Popen(command, cwd=folder, env=env))
        try:
            with Control(url) as control:
                _wait(lambda: len(control.allowed_tasks()) == BEATS, 60)
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
    target = STORED_TICK + 0.25
    return [
        Row(f"celery schedules {name}", f"edit seen by a beat, p99 ({edits} edits x {BEATS} "
            "beats)", p99, "s", target=f"<= {target:g} s", check=at_most(target)),
        Row(f"celery schedules {name}", "edit seen by a beat, p50", statistics.median(delays),
            "s"),
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
            print(f"{row.bench:24} {row.figure:50} {row.value:10.4g} {row.unit}")


if __name__ == "__main__":
    main()
