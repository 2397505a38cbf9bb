"""A standalone scheduler serving its metrics: ``python -m tests.metrics.standalone URL PORT``.

Two jobs every second on the backend at URL: ``ok`` succeeds, ``boom`` raises (one attempt).
"""

from __future__ import annotations

import sys

import relay
from relay import metrics


def main() -> None:
    url, port = sys.argv[1], int(sys.argv[2])
    scheduler = relay.Scheduler(url, tick=0.1)

    @scheduler.job(every=1, name="ok")
    def ok(run: relay.Run) -> None:
        pass

    @scheduler.job(every=1, name="boom", max_attempts=1)
    def boom(run: relay.Run) -> None:
        raise RuntimeError("failing on purpose")

    metrics.instrument(scheduler)
    metrics.serve(port, addr="127.0.0.1")
    scheduler.run()


if __name__ == "__main__":
    main()
