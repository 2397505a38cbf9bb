"""A real scheduler process in RabbitMQ consumer mode (``python -m`` this module, JSON args).

It schedules one job under ``args["job"]`` and runs :meth:`relay.Scheduler.run` until SIGTERM (or
SIGKILL). The job's handler appends JSON lines to ``args["log"]`` — ``start`` and ``end`` with the
run, its attempt, its token and this process's pid — sleeps ``args["sleep"]`` seconds (plus
``args["sleep_first"]`` on attempt 1), raises if ``args["fail"]``, and with ``args["fence"]`` makes
a fenced write keyed by the run into that SQLite file (``end`` says whether it was applied); a
``ready`` line says its consumers are subscribed. ``args["max_attempts"]`` is the job's own. With
``args["every"]`` the job is due every that many seconds (the gate decides who publishes each
run); without, it is never due and the process only consumes what tests publish. Every Relay event
its ``Scheduler.on`` hooks receive is a ``relay`` line with its type and run id.
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
from relay.events import Event
from relay.fencing import SQLFence


def main(args: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING)
    scheduler = Scheduler(args["url"], tick=0.2, stop_timeout=args.get("stop_timeout", 5))

    def note(event: str, run: Run | None = None, **extra: Any) -> None:
        line = {"event": event, "run": run and run.id, "attempt": run and run.attempt,
                "token": run and run.token, "pid": os.getpid(), "at": time.time(),
                **extra}  # fmt: skip
        with open(args["log"], "a") as log:
            log.write(json.dumps(line) + "\n")

    def hook(event: Event) -> None:
        note("relay", type=event.type, run_id=getattr(event, "run_id", None))

    scheduler.on(Event, hook)

    def say_ready() -> None:
        if scheduler.backend.wait_subscribed(60):  # type: ignore[union-attr]
            note("ready")

    def handler(run: Run) -> None:
        note("start", run)
        time.sleep(args.get("sleep", 0) + (args.get("sleep_first", 0) if run.attempt == 1 else 0))
        if args.get("fail"):
            raise RuntimeError("this job always fails")
        if args.get("fence"):
            fence = SQLFence.sqlite(args["fence"])
            note("end", run, fenced=fence.write(run.id, run.token, str(os.getpid())))
            return
        note("end", run)

    schedule: dict[str, Any] = (
        {"every": args["every"]} if args.get("every") else {"cron": "0 0 1 1 *"}
    )
    if args.get("max_attempts"):
        schedule["max_attempts"] = args["max_attempts"]
    scheduler.job(name=args["job"], **schedule)(handler)  # type: ignore[call-overload]
    threading.Thread(target=say_ready, daemon=True).start()
    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
