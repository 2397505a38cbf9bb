"""A scheduler instance watched three ways: ``python -m tests.support.monitored_instance JSON``.

It runs one job, ``export``, every second with ``expect_success_within`` of two seconds, on the
given store URL; registers it with a Healthchecks (``api_url``) and pings it on each run; and
appends a line per succeeded run to ``log``, so the test knows the fleet was running.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import relay
from relay.monitors.healthchecks import Healthchecks


def main(args: dict[str, Any]) -> None:
    scheduler = relay.Scheduler(
        args["url"], tick=0.1, owner=f"{args['name']}:{os.getpid()}", stop_timeout=1
    )
    log = Path(args["log"])

    @scheduler.job(every=1, name="export", expect_success_within=2)
    def export(run: relay.Run) -> None:
        with log.open("a") as out:
            out.write(json.dumps([run.id, args["name"], time.time()]) + "\n")

    monitor = Healthchecks(args["api_key"], api_url=args["api_url"])
    monitor.register(scheduler.jobs.values())
    monitor.send_pings(scheduler.on)
    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
