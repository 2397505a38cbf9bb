"""One standalone scheduler for the failover benchmark: ``python -m bench.failover_instance JSON``.

It runs one job whose run never ends by itself; each start appends ``start <pid> <attempt>
<time>`` to the log (the time is this process's ``time.time()`` right after the store accepted the
start). ``ready <pid>`` is written before the first tick.
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
    """Run the one job until SIGKILL or SIGTERM (which hands the run over at once)."""
    log = Path(args["log"])
    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=args["tick"],
        owner=f"bench:{os.getpid()}", stop_timeout=0.001,
    )  # fmt: skip

    def write(line: str) -> None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)

    # One slot an hour, due at once (catch_up covers it), never two runs at once, and attempts
    # enough for every kill: each kill is a failed attempt.
    @scheduler.job(every=3600, name="failover", catch_up=86400, overlap="skip", max_attempts=10**6)
    def job(run: relay.Run) -> None:
        write(f"start {os.getpid()} {run.attempt} {time.time():.6f}")
        time.sleep(10**6)

    write(f"ready {os.getpid()}")
    scheduler.run()
    write(f"stopped {os.getpid()}")  # run() returned: the hand-over was written


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
