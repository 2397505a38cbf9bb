"""How often RabbitMQ consumer mode loses a run when schedulers are killed: the lost-run window.

Usage: ``python bench/bench_rabbitmq_lost_runs.py [--kills K] [--aim MS] [--url AMQP_URL]``.

Three real scheduler processes (``relay.Scheduler`` in consumer mode, a job due every second,
ticking every 10 ms) race for each run. ``K`` times, the bench SIGKILLs one of them at a random
moment and starts a new one. A run is lost when a scheduler dies after winning the run's gate and
before the broker confirmed the run's publish: no other scheduler can win it again.

* ``--aim 0`` (default 1000): kills fall anywhere in the second, as crashes would.
* ``--aim MS``: kills fall in the first ``MS`` milliseconds after a slot, where the gate and the
  publish happen, to see the window at all.

Prints the slots scheduled, the runs lost and the rate per kill; every queue it declares has a
unique prefix and is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika

from relay.backends import open_backend
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.runs import parse_run_id, run_id

CHILD = """
import json, os, sys, time
from relay import Scheduler
url, log = sys.argv[1], sys.argv[2]
scheduler = Scheduler(url, tick=0.01, stop_timeout=1)

@scheduler.job(name="lost", every=1)
def lost(run):
    with open(log, "a") as out:
        out.write(json.dumps({"run": run.id, "pid": os.getpid()}) + "\\n")

scheduler.run()
"""


def spawn(url: str, log: Path) -> subprocess.Popen[bytes]:
    """One scheduler process."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--aim", type=float, default=1000.0, help="kill within MS after a slot")
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    args = parser.parse_args()
    prefix = f"relay_lost_{secrets.token_hex(4)}"
    url = f"{args.url}?mode=consumer&prefix={prefix}&retention=600"
    log = Path(tempfile.mkdtemp()) / "runs.jsonl"
    procs = [spawn(url, log) for _ in range(3)]
    time.sleep(3)  # the schedulers start and subscribe
    started = time.time()
    try:
        for _ in range(args.kills):
            now = time.time()
            time.sleep(1 - now % 1 + random.uniform(0, args.aim) / 1000)
            victim = random.randrange(len(procs))
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            procs[victim] = spawn(url, log)
        ended = time.time()
        time.sleep(4)  # the last runs drain
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
    ran = {json.loads(line)["run"] for line in log.read_text().splitlines() if line}
    slots = [run_id("lost", parse_run_id(r)[1]) for r in ran]
    first = min(parse_run_id(r)[1] for r in slots)
    expected = {
        run_id("lost", first.fromtimestamp(s, first.tzinfo))
        for s in range(int(max(first.timestamp(), started + 1)), int(ended))
    }
    lost = sorted(expected - ran)
    backend = open_backend(url)
    assert isinstance(backend, RabbitMQConsumerBackend)
    dead = backend.dead_runs("lost")
    backend.close()
    _cleanup(args.url, prefix, ran | expected)
    print(f"consumer mode, 3 schedulers, {args.kills} SIGKILLs aimed within {args.aim:g} ms")
    print(f"  slots scheduled while killing   {len(expected)}")
    print(f"  runs lost                       {len(lost)}  {lost[:5]}")
    print(f"  lost per kill                   {len(lost) / args.kills:.3f}")
    print(f"  dead-lettered (not lost)        {len(dead)}  {dead[:3]}")


def _cleanup(url: str, prefix: str, runs: set[str]) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for name in (f"{prefix}.run.lost", f"{prefix}.dead.lost", f"{prefix}.outcomes"):
        channel.queue_delete(name)
    for run in runs:
        channel.queue_delete(f"{prefix}.claim.{run}")
    connection.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
