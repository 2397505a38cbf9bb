"""One standalone scheduler instance on a claim backend, for tests: ``python -m … URL LOG SECONDS``.

It runs a job every second for SECONDS seconds and appends ``<run id> <pid>`` to LOG for each run
it performs (one write per line, O_APPEND, so instances never interleave within a line).
"""

from __future__ import annotations

import os
import sys
import threading

import relay


def main(url: str, log: str, seconds: float) -> None:
    """Run the scheduler until ``seconds`` have passed."""
    scheduler: relay.Scheduler[relay.ClaimBackend] = relay.Scheduler(url, tick=0.1)

    @scheduler.job(every=1, name="every-second")
    def record(run: relay.Run) -> None:
        line = f"{run.id} {os.getpid()}\n".encode()
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    threading.Timer(seconds, scheduler.stop).start()
    try:
        scheduler.run()
    finally:
        scheduler.backend.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
