"""A real scheduler instance for tests: ``python -m tests.support.instance JSON``.

It runs one job on the given backend URL; each run appends ``(run id, attempt, token, owner,
event, time)`` lines to a log file so that the test can see who started and who finished which
run, and when (this process's ``time.time()``). With ``"events": PATH`` it also logs Relay's
events to PATH as JSON lines; with ``"start_at": EPOCH`` it opens the store at that wall time
(instances starting together).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import relay
from tests.support.event_log import record_events


def main(args: dict[str, Any]) -> None:
    # SIGUSR1 prints every thread's stack to stderr: a test whose instance hangs shows where.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    log = Path(args["log"])
    record_events(args.get("events"))
    time.sleep(max(0.0, args.get("start_at", 0) - time.time()))
    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.1,
        owner=f"{args['name']}:{os.getpid()}", stop_timeout=args.get("stop_timeout", 1),
    )  # fmt: skip

    def write(run: relay.Run, event: str) -> None:
        with log.open("a") as out:
            line = [run.id, run.attempt, run.token, args["name"], event, time.time()]
            out.write(json.dumps(line) + "\n")

    @scheduler.job(
        every=args["every"], name="job", max_attempts=args.get("max_attempts", 3),
        catch_up=args.get("catch_up", 0), overlap=args.get("overlap", "allow"),
        stale_after=args.get("stale_after"),
    )  # fmt: skip
    def job(run: relay.Run) -> None:
        write(run, "start")
        time.sleep(args["work"])
        write(run, "done")

    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
