"""One instance for ``bench_schedules``: ``python bench/schedules_instance.py URL LOG TICK``.

A standalone scheduler allowing the task ``echo``; each stored-schedule change it applies appends
``[version, time.time()]`` to LOG, so the benchmark sees when each instance saw each edit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import time  # noqa: E402

import relay  # noqa: E402
from relay.events import ScheduleApplied  # noqa: E402


def main(url: str, log: str, tick: float) -> None:
    scheduler = relay.Scheduler(url, tick=tick)
    scheduler.register("echo", lambda run: None)
    with Path(log).open("a", buffering=1) as out:

        def seen(event: ScheduleApplied) -> None:
            out.write(json.dumps([event.version, time.time()]) + "\n")

        scheduler.on(ScheduleApplied, seen)
        scheduler.run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
