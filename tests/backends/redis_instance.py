"""One Relay instance in its own process, for the Redis fault tests.

``python -m tests.backends.redis_instance JSON`` runs a :class:`relay.Scheduler` on ``url`` with the
jobs named in ``jobs`` (every ``every`` seconds) until SIGTERM. Each run writes ``steps`` values
through a fence (a SQLite file) with its token, ``step_time`` seconds apart, the last one
``"done"``, and prints one JSON line per write saying whether the fence applied it.

``shift`` moves this process's ``time.time`` by that many seconds before Relay is imported; the
scheduler still decides slots on the real clock, so only the backend and runner see a wrong clock.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

ARGS: dict[str, Any] = json.loads(sys.argv[1])
real_time = time.time
if ARGS.get("shift"):
    time.time = lambda: real_time() + ARGS["shift"]

from relay import Run, Scheduler  # noqa: E402
from relay.fencing import SQLFence  # noqa: E402

_lock = threading.Lock()


def emit(**values: Any) -> None:
    """Print one event."""
    with _lock:
        print(json.dumps(values), flush=True)


def handler(run: Run) -> None:
    """Write ``steps`` fenced values for the run; report each write."""
    fence = SQLFence.sqlite(ARGS["fence_db"])
    try:
        for step in range(ARGS["steps"]):
            if step:
                time.sleep(ARGS["step_time"])
            last = step == ARGS["steps"] - 1
            applied = fence.write(run.id, run.token, "done" if last else f"step {step}")
            emit(
                event="write", run=run.id, token=run.token, step=step, done=last,
                applied=applied, owner=ARGS["owner"], at=real_time(),
            )  # fmt: skip
    finally:
        fence.connection.close()  # type: ignore[attr-defined]


def main() -> None:
    """Run the scheduler until SIGTERM."""
    scheduler: Scheduler[Any] = Scheduler(
        ARGS["url"],
        lease=ARGS["lease"],
        heartbeat=ARGS["heartbeat"],
        tick=ARGS["tick"],
        owner=ARGS["owner"],
        stop_timeout=ARGS["steps"] * ARGS["step_time"] + 10,
        clock=real_time,
    )
    for name in ARGS["jobs"]:
        scheduler.job(every=ARGS["every"], name=name, max_attempts=5)(handler)
    emit(event="ready")
    scheduler.run()
    emit(event="stopped")


if __name__ == "__main__":
    main()
