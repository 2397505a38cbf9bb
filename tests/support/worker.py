"""A real process for contract tests: ``python -m tests.support.worker COMMAND JSON``.

It opens the backend from a URL, does what the command says, and prints one JSON object per line
so the test can read what happened. Each command is small on purpose.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from relay.backends import open_backend
from relay.contract import AcquireRequest, LeaseBackend, Outcome
from relay.errors import LeaseLost
from relay.fencing import SQLFence

UTC = timezone.utc


def emit(**values: Any) -> None:
    """Print one event for the test."""
    print(json.dumps(values), flush=True)


def slot(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def race_acquire(args: dict[str, Any]) -> None:
    """Acquire every slot in ``slots`` (ms) of ``job``, in batches; report the ones won."""
    backend = open_backend(args["url"])
    assert isinstance(backend, LeaseBackend)
    emit(event="ready")
    while time.time() < args["start_at"]:
        time.sleep(0.001)
    won = []
    for ms in args["slots"]:
        request = AcquireRequest(job=args["job"], slot=slot(ms), owner=args["owner"], lease=60)
        if backend.acquire(request).outcome is Outcome.WON:
            won.append(ms)
    emit(event="done", won=won)
    backend.close()


def race_claim(args: dict[str, Any]) -> None:
    """Claim every slot in ``slots`` (ms) of ``job``; report the ones won."""
    backend = open_backend(args["url"])
    emit(event="ready")
    while time.time() < args["start_at"]:
        time.sleep(0.001)
    won = [ms for ms in args["slots"] if backend.claim(args["job"], slot(ms))]  # type: ignore[union-attr]
    emit(event="done", won=won)
    backend.close()


def hold(args: dict[str, Any]) -> None:
    """Acquire and start one run, heartbeat until killed; once fenced out, report refusals."""
    backend = open_backend(args["url"])
    request = AcquireRequest(
        job=args["job"],
        slot=slot(args["slot"]),
        owner=args["owner"],
        lease=args["lease"],
        max_attempts=args.get("max_attempts", 3),
    )
    result = backend.acquire(request)  # type: ignore[union-attr]
    assert result.run is not None, result
    run = backend.start(result.run.id, result.run.token, args["owner"], args["lease"])  # type: ignore[union-attr]
    fence = SQLFence.sqlite(args["fence_db"]) if args.get("fence_db") else None
    emit(event="holding", run=run.id, token=run.token)
    deadline = time.monotonic() + args.get("hold_for", 60)
    while time.monotonic() < deadline:
        time.sleep(args["heartbeat"])
        try:
            backend.heartbeat(run.id, run.token, args["lease"])  # type: ignore[union-attr]
        except LeaseLost:
            emit(event="woke")  # frozen past our lease: a successor holds the run now
            report_after_freeze(backend, run.id, run.token, args["lease"], fence)
            return


def report_after_freeze(
    backend: Any, run_id: str, token: int, lease: float, fence: SQLFence | None
) -> None:
    """After a freeze, every write of the stale runner must be refused: say which were."""
    outcomes = {}
    try:
        backend.heartbeat(run_id, token, lease)
        outcomes["heartbeat"] = "accepted"
    except LeaseLost:
        outcomes["heartbeat"] = "refused"
    if fence is not None:
        applied = fence.write("report", token, "from the stale runner")
        outcomes["fenced_write"] = "accepted" if applied else "refused"
    try:
        backend.finish(run_id, token, succeeded=True)
        outcomes["finish"] = "accepted"
    except LeaseLost:
        outcomes["finish"] = "refused"
    emit(event="stale", **outcomes)


COMMANDS = {"race-acquire": race_acquire, "race-claim": race_claim, "hold": hold}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
