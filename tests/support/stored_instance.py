"""A real scheduler instance that allows stored schedules: ``python -m tests.support.stored_instance
JSON``.

It allows the task ``echo``; each run appends ``[run id, args, schedule version, name, time]`` to
the log file. With ``"code_job": NAME`` it also defines a code job of that name (its start is
refused when a stored schedule has the name: it writes the error to ``log`` and exits 3). With
``"hang": true`` each run, once logged, never ends (the instance is to be killed mid-run).
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
        args["url"], lease=5, heartbeat=1, tick=args.get("tick", 0.1),
        owner=f"{args['name']}:{os.getpid()}", stop_timeout=1,
    )  # fmt: skip

    @scheduler.task("echo")
    def echo(run: relay.Run) -> None:
        line = [run.id, list(run.args), run.schedule_version, args["name"], time.time()]
        with log.open("a") as out:
            out.write(json.dumps(line) + "\n")
        while args.get("hang"):
            time.sleep(1)

    if args.get("code_job"):
        scheduler.job(every=3600, name=args["code_job"])(lambda run: None)
    try:
        scheduler.run()
    except relay.ConfigurationError as exc:
        log.write_text(str(exc))
        sys.exit(3)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
