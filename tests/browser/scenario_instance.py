"""A real scheduler for the timeline scenario: ``python -m tests.browser.scenario_instance JSON``.

Two jobs, every second: ``report`` (up to three attempts, its work lasts ``work`` seconds) and
``slow`` (``overlap="skip"``, its work lasts 2.5 s, so the slots in between are skipped as
overlaps). Each start and end of ``report`` is appended to the log as
``[run id, attempt, token, instance name, event, time]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import relay


def main(args: dict[str, Any]) -> None:
    log = Path(args["log"])
    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.1,
        owner=f"{args['name']}:{os.getpid()}", stop_timeout=args["stop_timeout"],
    )  # fmt: skip

    def write(run: relay.Run, event: str) -> None:
        line = [run.id, run.attempt, run.token, args["name"], event, time.time()]
        with log.open("a") as out:
            out.write(json.dumps(line) + "\n")

    @scheduler.job(every=1, name="report", max_attempts=3)
    def report(run: relay.Run) -> None:
        write(run, "start")
        time.sleep(args["work"])
        write(run, "done")

    @scheduler.job(every=1, name="slow", overlap="skip")
    def slow(run: relay.Run) -> None:
        time.sleep(2.5)

    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
