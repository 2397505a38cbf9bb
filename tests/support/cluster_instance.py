"""One instance for the store failover tests: ``python -m tests.support.cluster_instance JSON``.

A :class:`relay.Scheduler` on ``url`` runs one job every ``every`` seconds (catching up
``catch_up`` seconds of missed slots) whose handler works ``work`` seconds. Each start and each
completed handler appends a JSON line to ``log``: ``{"event", "run", "attempt", "token",
"owner", "at"}``, ``at`` being ``time.time()``; one ``O_APPEND`` write a line, so lines from
several processes stay whole. ``{"event": "ready"}`` comes before the first tick.

``finish_tries`` sets how many times the runner sends a finish the store did not answer, where
the runner counts its tries (``relay.engine.running.FINISH_TRIES``): a failover outlasts the
default three.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import relay
from relay.engine import running


def main(args: dict[str, Any]) -> None:
    """Run the scheduler until SIGTERM."""
    if hasattr(running, "FINISH_TRIES"):  # a runner that gives up a finish after a few tries
        running.FINISH_TRIES = args["finish_tries"]
    owner = f"{args['name']}:{os.getpid()}"

    def write(event: str, run: relay.Run | None = None) -> None:
        line: dict[str, Any] = {"event": event, "owner": owner, "at": time.time()}
        if run is not None:
            line.update(run=run.id, attempt=run.attempt, token=run.token)
        fd = os.open(args["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)

    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.1, owner=owner,
        stop_timeout=args["work"] + 5,
    )  # fmt: skip

    @scheduler.job(
        every=args["every"], name=args["job"], catch_up=args["catch_up"], max_attempts=50
    )
    def job(run: relay.Run) -> None:
        write("start", run)
        time.sleep(args["work"])
        write("done", run)

    write("ready")
    scheduler.run()
    write("stopped")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
