"""A real process holding several runs at once through one runner, for the batch heartbeat test:
``python -m tests.support.renewing_instance JSON``.

It leases and begins one run per job of ``jobs`` (lease ``lease``, heartbeat ``heartbeat``),
prints ``ready`` with their ids, executes them for ``hold`` seconds, finishes them, and prints
``done`` with how many single heartbeats it sent, the number of runs in each ``heartbeat_many``
it sent while all of them ran, and the runs it was told it lost.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from relay.backends import open_backend
from relay.contract import AcquireRequest, is_lease
from relay.engine import Runner
from relay.events import EventBus, FencedOff, RunLeaseLost

UTC = timezone.utc


def emit(**values: Any) -> None:
    """Print one event for the test."""
    print(json.dumps(values), flush=True)


def main(args: dict[str, Any]) -> None:
    backend = open_backend(args["url"])
    assert is_lease(backend)
    singles: list[str] = []
    sizes: list[int] = []
    single: Callable[..., None] = backend.heartbeat
    batch: Callable[..., Any] = getattr(backend, "heartbeat_many", None) or (lambda *a: [])

    def heartbeat(run_id: str, token: int, lease: float) -> None:
        singles.append(run_id)
        single(run_id, token, lease)

    def heartbeat_many(runs: list[tuple[str, int]], lease: float) -> Any:
        sizes.append(len(runs))
        return batch(runs, lease)

    backend.heartbeat = heartbeat  # type: ignore[method-assign]
    if hasattr(backend, "heartbeat_many"):
        backend.heartbeat_many = heartbeat_many  # type: ignore[attr-defined]
    lost: list[str] = []
    events = EventBus()
    events.on(FencedOff, lambda event: lost.append(event.run_id))
    events.on(RunLeaseLost, lambda event: lost.append(event.run_id))
    runner = Runner(
        backend, owner="one", lease=args["lease"], heartbeat=args["heartbeat"], events=events
    )
    slot = datetime.fromtimestamp(args["slot"], UTC)
    active = []
    for job in args["jobs"]:
        won = backend.acquire(AcquireRequest(job, slot, "one", args["lease"])).run
        assert won is not None, job
        begun = runner.begin(won)
        assert begun is not None, job
        active.append(begun)
    emit(event="ready", runs=[a.run.id for a in active])
    time.sleep(args["hold"])
    all_running = list(sizes)  # a round between two ends below renews fewer
    states = [a.succeed() for a in active]
    emit(
        event="done",
        singles=len(singles),
        sizes=all_running,
        lost=lost,
        states=[str(s and s.value) for s in states],
    )
    backend.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
