"""A scheduler instance for partition tests: ``python -m tests.support.partition_instance JSON``.

Two jobs on the given backend URL (which may go through a fault proxy):

* ``long``: one slot a day, caught up (the options ``long``: the test's
  :func:`tests.support.slots.one_slot_behind`, so that no second slot falls due mid-test), so the
  first instance up runs it at once. Its handler writes ``started`` through a
  :class:`relay.fencing.SQLFence` on a local SQLite file (the resource the run writes to, not
  behind the proxy), then works ``work`` seconds or until ``run.lost`` is set. Once lost, it
  waits ``after_lost`` seconds (another instance takes the run over meanwhile) and tries one more
  fenced write, which must be refused;
* ``tick``: one slot a second, a short handler: the job that must go on.

Each handler appends JSON lines ``[job, run id, attempt, token, instance, what, monotonic]`` to
the log; Relay's events go to ``events`` as JSON lines (``tests.support.event_log``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import relay
from relay.fencing import SQLFence
from tests.support.event_log import record_events


def main(args: dict[str, Any]) -> None:
    log = Path(args["log"])
    record_events(args["events"])
    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.1,
        owner=f"{args['name']}:{os.getpid()}", stop_timeout=1,
    )  # fmt: skip

    def write(run: relay.Run, what: str) -> None:
        line = [run.job, run.id, run.attempt, run.token, args["name"], what, time.monotonic()]
        with log.open("a") as out:
            out.write(json.dumps(line) + "\n")

    @scheduler.job(**args["long"], name="long", max_attempts=5)
    def long(run: relay.Run) -> None:
        fence = SQLFence.sqlite(args["fence"])
        write(run, "start")
        fence.write("report", run.token, f"started by {args['name']}")
        began = time.monotonic()
        while time.monotonic() - began < args["work"]:
            if run.lost.is_set():
                write(run, "lost")
                time.sleep(args["after_lost"])
                ok = fence.write("report", run.token, f"late write by {args['name']}")
                write(run, "fenced write accepted" if ok else "fenced write refused")
                return
            time.sleep(0.02)
        write(run, "done")

    @scheduler.job(every=1, name="tick", max_attempts=5)
    def tick(run: relay.Run) -> None:
        write(run, "start")
        write(run, "done")

    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
