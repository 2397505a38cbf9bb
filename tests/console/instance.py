"""A live instance for the console's tests: ``python -m tests.console.instance JSON``.

A real :class:`relay.Scheduler` on the store ``url``, named ``name``: the job ``tick`` every
second (so runs keep coming), the job ``HOSTILE`` (a name full of HTML) every hour, and the task
``echo`` stored schedules may run (each run appends its id to ``log``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import relay

HOSTILE = "<script>alert('job')</script>&\"x\"/é"
"""A job name an attacker would choose: markup, quotes, an ampersand, a slash."""


def main(args: dict[str, Any]) -> None:
    log = Path(args["log"])
    scheduler = relay.Scheduler(
        args["url"], lease=5, heartbeat=1, tick=0.2, owner=f"{args['name']}:{os.getpid()}",
        stop_timeout=1,
    )  # fmt: skip

    @scheduler.task("echo")
    def echo(run: relay.Run) -> None:
        with log.open("a") as out:
            out.write(json.dumps([run.id, list(run.args)]) + "\n")

    scheduler.job(every=1, name="tick")(lambda run: None)
    scheduler.job(every=3600, name=HOSTILE)(lambda run: None)
    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
