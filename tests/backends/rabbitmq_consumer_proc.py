"""A real scheduler process in RabbitMQ consumer mode (``python -m`` this module, JSON args).

It schedules one job under ``args["job"]`` and runs :meth:`relay.Scheduler.run` until SIGTERM (or
SIGKILL). The job's handler appends JSON lines to ``args["log"]`` — ``start`` and ``end`` with the
run, its attempt and this process's pid — sleeps ``args["sleep"]`` seconds, and raises if
``args["fail"]``; a ``ready`` line says its consumers are subscribed. With ``args["every"]`` the
job is due every that many seconds (the gate decides who publishes each run); without, it is never
due and the process only consumes what tests publish.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

from relay import Run, Scheduler


def main(args: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING)
    scheduler = Scheduler(args["url"], tick=0.2, stop_timeout=args.get("stop_timeout", 5))

    def note(event: str, run: Run | None = None) -> None:
        line = {"event": event, "run": run and run.id, "attempt": run and run.attempt,
                "pid": os.getpid(), "at": time.time()}  # fmt: skip
        with open(args["log"], "a") as log:
            log.write(json.dumps(line) + "\n")

    def say_ready() -> None:
        if scheduler.backend.wait_subscribed(60):  # type: ignore[union-attr]
            note("ready")

    def handler(run: Run) -> None:
        note("start", run)
        time.sleep(args.get("sleep", 0))
        if args.get("fail"):
            raise RuntimeError("this job always fails")
        note("end", run)

    schedule = {"every": args["every"]} if args.get("every") else {"cron": "0 0 1 1 *"}
    scheduler.job(name=args["job"], **schedule)(handler)  # type: ignore[call-overload]
    threading.Thread(target=say_ready, daemon=True).start()
    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
