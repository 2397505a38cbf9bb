"""One Relay instance of a rolling upgrade: ``python tests/upgrade/instance.py JSON``.

Run by the previous release's interpreter as well as by HEAD's, so it imports only the standard
library and ``relay``, and uses only what both releases offer. It runs the code job ``tick``
(``every=1``, or ``"every"`` seconds: a deploy that changes it), which every instance races for,
its own code job ``own-<name>`` (``every=1``), which only it runs (proof that it can still lease
runs, whoever wins the race), and allows the task ``echo`` of stored schedules. Each line it
appends to its own ``log`` file is a JSON list:

- ``["hello", name, relay version, relay's path]`` once the scheduler is made;
- ``["run", job, run id, attempt, token, name]`` for each run it starts;
- ``["event", type, message]`` for each Relay event at WARNING or above (what went wrong);
- ``["refused", error class, message]`` when opening the store or running raises a
  ``RelayError`` (then it exits with 3).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

import relay


def write(path: str, *line: Any) -> None:
    """One line, one ``write`` on an ``O_APPEND`` file: a reader never sees half a line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps([*line, time.time()]) + "\n").encode())
    finally:
        os.close(fd)


class EventLines(logging.Handler):
    """Relay's events at WARNING and above, as ``event`` lines."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.WARNING)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        kind = getattr(record, "relay_event", record.name)
        write(self.path, "event", kind, record.getMessage())


def main(args: dict[str, Any]) -> None:
    log, name = args["log"], args["name"]
    logging.getLogger("relay.events").addHandler(EventLines(log))
    try:
        scheduler = relay.Scheduler(
            args["url"], lease=args.get("lease", 5), heartbeat=1, tick=0.1,
            owner=f"{name}:{os.getpid()}", stop_timeout=1,
        )  # fmt: skip
        write(log, "hello", name, relay.__version__, relay.__file__)

        def record(run: relay.Run) -> None:
            write(log, "run", run.job, run.id, run.attempt, run.token, name)

        for job, every in (("tick", args.get("every", 1)), (f"own-{name}", 1)):
            scheduler.job(every=every, name=job, catch_up=args.get("catch_up", 10))(record)
        scheduler.task("echo")(record)
        scheduler.run()
    except relay.RelayError as exc:  # the store refused this Relay, at open or later
        write(log, "refused", type(exc).__name__, str(exc))
        sys.exit(3)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
