"""Start real ``celery beat`` and ``celery worker`` processes for one test, and read what they did.

Each cluster has its own broker queue (and Redis key prefix), its own Relay store and its own
events file; every process runs in its own session so a SIGKILL takes its children with it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import Celery
from kombu import Queue

from relay.runs import HEADER

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.celery_integration.app"
RELAY_SCHEDULER = "relay_celery.RelayScheduler"


class Cluster:
    """Processes sharing one broker queue and one Relay backend."""

    def __init__(self, tmp: Path, broker: str, backend: str, schedule: dict[str, Any]) -> None:
        self.tmp = tmp
        self.out = tmp / "events.jsonl"
        self.relay_events = tmp / "relay-events.jsonl"
        """Relay's own events, logged as JSON by every process (``tests.support.event_log``)."""
        self.queue = f"relay_t_{secrets.token_hex(4)}"
        self.env = {
            **os.environ,
            "RELAY_T_BROKER": broker,
            "RELAY_T_QUEUE": self.queue,
            "RELAY_T_BACKEND": backend,
            "RELAY_T_OUT": str(self.out),
            "RELAY_T_EVENTS": str(self.relay_events),
            "RELAY_T_SCHEDULE": json.dumps(schedule),
            "PYTHONPATH": str(ROOT),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def set(self, **values: float | str) -> None:
        """Set RELAY_T_<NAME> for processes started from now on (lease, heartbeat, queue_lease)."""
        for name, value in values.items():
            self.env[f"RELAY_T_{name.upper()}"] = str(value)

    def beat(self, scheduler: str | None = RELAY_SCHEDULER) -> subprocess.Popen[bytes]:
        """Start a ``celery beat`` with ``scheduler`` (``None``: the one the app configures)."""
        return self._start("beat", ["beat", *(["-S", scheduler] if scheduler else [])])

    def worker(
        self,
        pool: str = "threads",
        concurrency: int = 2,
        beat: bool = False,
        queues: tuple[str, ...] = (),
    ) -> subprocess.Popen[bytes]:
        """Start a ``celery worker`` (gossip, mingle and remote control off: nothing shared);
        ``beat``: with an embedded beat (``--beat``), forked from the worker's main process;
        ``queues``: the queues it consumes besides the cluster's own."""
        name = f"w{len(self.processes)}_{self.queue}@localhost"
        args = ["worker", "-P", pool, "-c", str(concurrency), "-n", name]
        if queues:
            args += ["-Q", ",".join([self.queue, *queues])]
        if beat:
            args += ["--beat", "-s", str(self.tmp / f"beat-schedule-{len(self.processes)}")]
        return self._start("worker", [*args, "--without-gossip", "--without-mingle"])

    def _start(self, kind: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{kind}{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", APP, *args, "-l", "INFO"],
            cwd=self.tmp,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes.append(process)
        return process

    def exit_code(self, process: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
        """Wait for a process that should stop by itself; fail with the logs if it does not."""
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the process did not stop by itself\n{self.logs()}") from None

    def kill(self, process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the process and its children."""
        if process.poll() is None:
            os.killpg(process.pid, sig)
        if sig == signal.SIGKILL:
            process.wait(10)

    def stop(self) -> None:
        """SIGKILL everything still running."""
        for process in self.processes:
            if process.poll() is None:
                self.kill(process)

    def publish(self, run_headers: dict[str, Any]) -> None:
        """Publish the test task with a run header, as a late duplicate from a broker would be."""
        app = Celery("relay_test_publisher", broker=self.env["RELAY_T_BROKER"])
        if "redis" in self.env["RELAY_T_BROKER"]:
            app.conf.broker_transport_options = {"global_keyprefix": f"{self.queue}:"}
        queue = Queue(self.queue, queue_arguments={"x-expires": 120_000})
        with app.connection_for_write() as connection:
            # celery-types says a queue's name; Celery takes a kombu Queue too (its arguments kept).
            app.send_task(
                f"{APP}.record",
                connection=connection,
                queue=queue,  # type: ignore[arg-type]
                headers={HEADER: run_headers},
            )

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Events the task wrote so far (``start`` / ``end``), in order."""
        if not self.out.exists():
            return []
        lines = self.out.read_text().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        return [e for e in events if kind is None or e["event"] == kind]

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        """Poll ``check`` until it holds; fail with the processes' logs if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def wait_quiet(self, seconds: float = 2.0, timeout: float = 60.0) -> None:
        """Wait until no event was written for ``seconds`` (the queue has drained)."""
        last = (-1, time.monotonic())

        def quiet() -> bool:
            nonlocal last
            count = len(self.events())
            if count != last[0]:
                last = (count, time.monotonic())
            return time.monotonic() - last[1] >= seconds

        self.wait_for("the workers to go quiet", quiet, timeout)

    def logs(self, tail: int | None = 4000) -> str:
        """Every process's log: its last ``tail`` characters (for failure messages), or all."""
        parts = []
        for path in sorted(self.tmp.glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"----- {path.name}\n{text if tail is None else text[-tail:]}")
        return "\n".join(parts)


@contextmanager
def cluster(tmp: Path, broker: str, backend: str, schedule: dict[str, Any]) -> Iterator[Cluster]:
    """A :class:`Cluster` whose processes are all killed when the block ends."""
    running = Cluster(tmp, broker, backend, schedule)
    try:
        yield running
    finally:
        running.stop()
        _forget_broker_keys(broker, running.queue)


def _forget_broker_keys(broker: str, queue: str) -> None:
    """Delete what Celery left under this cluster's Redis key prefix, so nothing accumulates."""
    if not broker.startswith("redis"):
        return  # RabbitMQ test queues are declared per cluster and are few
    import redis

    client = redis.Redis.from_url(broker)
    try:
        keys = list(client.scan_iter(match=f"{queue}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
