"""Real processes for the PostgreSQL fault tests: ``python -m tests.backends.pg_procs CMD JSON``.

``instance`` runs a standalone Scheduler until SIGTERM and appends one JSON line per execution to
a log file; ``failover-instance`` writes one when a run starts and one when it ends, and catches
up. ``skewed`` shifts this process's ``time.time`` before Relay is imported, then tries to take a
run another process holds, and prints what it got; ``hold`` holds a run with its clock shifted;
``race-batch`` races batched acquires.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def spawn(command: str, args: dict[str, Any], stderr: Path) -> subprocess.Popen[str]:
    """Start this module as a process; its stderr goes to a file (a full pipe would block it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    with stderr.open("a") as errors:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.backends.pg_procs", command, json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=ROOT,
            env=env,
        )


def emit(**values: Any) -> None:
    """Print one event for the test."""
    print(json.dumps(values), flush=True)


def instance(args: dict[str, Any]) -> None:
    """A Scheduler with one job every second, whose runs take ``work`` seconds."""
    from relay import Run, Scheduler

    scheduler = Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.2,
        owner=args["owner"], stop_timeout=30,
    )  # fmt: skip

    @scheduler.job(every=1, name="every-second", max_attempts=3)
    def work(run: Run) -> None:
        line = {"run": run.id, "owner": run.owner, "token": run.token, "at": time.time()}
        with open(args["log"], "a") as log:
            log.write(json.dumps(line) + "\n")
        time.sleep(args["work"])

    emit(event="ready")
    scheduler.run()


def failover_instance(args: dict[str, Any]) -> None:
    """``instance`` with catch-up, writing a line when each run starts and one when it ends."""
    from relay import Run, Scheduler

    scheduler = Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.2,
        owner=args["owner"], stop_timeout=30,
    )  # fmt: skip

    @scheduler.job(every=1, name="every-second", max_attempts=3, catch_up=args["catch_up"])
    def work(run: Run) -> None:
        line = {"run": run.id, "owner": run.owner, "token": run.token, "attempt": run.attempt}
        with open(args["log"], "a") as log:
            log.write(json.dumps({**line, "start": time.time()}) + "\n")
        time.sleep(args["work"])
        with open(args["log"], "a") as log:
            log.write(json.dumps({**line, "end": time.time()}) + "\n")

    emit(event="ready")
    scheduler.run()


def _shift_clock(offset: float) -> Any:
    """Shift ``time.time`` by ``offset`` seconds (before Relay is imported); return the real one."""
    real_time = time.time
    time.time = lambda: real_time() + offset
    return real_time


def hold(args: dict[str, Any]) -> None:
    """``tests.support.worker``'s ``hold``, with this process's clock shifted by ``offset``."""
    _shift_clock(args["offset"])
    from tests.support.worker import hold as hold_run

    hold_run(args)


def skewed(args: dict[str, Any]) -> None:
    """With this process's clock shifted by ``offset`` seconds, try to take a held run."""
    real_time = _shift_clock(args["offset"])

    from relay.backends import open_backend
    from relay.contract import AcquireRequest
    from relay.engine import Decider
    from relay.jobs import make_job

    backend = open_backend(args["url"])
    assert backend.capability == "lease"
    slot = datetime.fromtimestamp(args["slot"] / 1000, timezone.utc)
    request = AcquireRequest(job=args["job"], slot=slot, owner="skewed", lease=30, max_attempts=3)
    outcome = backend.acquire(request).outcome.value
    decider = Decider(backend, owner="skewed", lease=30)
    decider.add(make_job(backend, name=args["job"], every=60, max_attempts=3))
    emit(
        outcome=outcome,
        reclaimable=[record.id for record in backend.reclaimable()],
        swept=[won.run.id for won in decider.sweep()],
        store_clock_lag=real_time() - backend.now().timestamp(),
        my_clock_lead=time.time() - real_time(),
    )
    backend.close()


def race_batch(args: dict[str, Any]) -> None:
    """Decide ``jobs`` x ``slots`` in batches of ``batch`` requests, jobs in a shuffled order."""
    import random

    from relay.backends import open_backend
    from relay.contract import AcquireRequest, Outcome

    backend = open_backend(args["url"])
    assert backend.capability == "lease"
    jobs = list(args["jobs"])
    random.Random(args["seed"]).shuffle(jobs)
    requests = [
        AcquireRequest(
            job=job, slot=datetime.fromtimestamp(ms / 1000, timezone.utc), owner=args["owner"],
            lease=60, overlap_skip=job.startswith("skip"),
        )
        for job in jobs
        for ms in args["slots"]
    ]  # fmt: skip
    emit(event="ready")
    time.sleep(max(0.0, args["start_at"] - time.time()))
    won = []
    for start in range(0, len(requests), args["batch"]):
        chunk = requests[start : start + args["batch"]]
        for request, result in zip(chunk, backend.acquire_many(chunk), strict=True):
            if result.outcome is Outcome.WON:
                won.append([request.job, int(request.slot.timestamp() * 1000)])
    emit(event="done", won=won)
    backend.close()


COMMANDS = {
    "failover-instance": failover_instance,
    "hold": hold,
    "instance": instance,
    "race-batch": race_batch,
    "skewed": skewed,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
