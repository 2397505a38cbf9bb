"""Real processes for the Dramatiq tests: ``dramatiq`` workers and ``relay-dramatiq`` schedulers.

Each test gets a :class:`Deployment`: one broker namespace or queue, one Relay store, one events
file, and the processes it started, which are all killed (process group, SIGKILL) at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from relay.backends import open_backend
from relay.runs import RunRecord

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@dataclass
class Deployment:
    """One isolated Dramatiq app: its settings, and the processes started for it."""

    tmp: Path
    broker: str
    broker_url: str
    queue: str
    backend: str
    jobs: dict[str, dict[str, Any]]
    lease: str = "2,0.5,10"
    stored: bool = False
    """Declare the actors of stored schedules (``RELAY_T_STORED``, see ``tests.dramatiq.app``)."""
    app: str = "tests.dramatiq.app"
    """The app module workers and schedulers import (``tests.dramatiq.django_app``: Django's)."""
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return self.tmp / "events.jsonl"

    @property
    def relay_events(self) -> Path:
        """Relay's own events, logged as JSON by every process (``tests.support.event_log``)."""
        return self.tmp / "relay-events.jsonl"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")]),
            "RELAY_T_BROKER": self.broker,
            "RELAY_T_BROKER_URL": self.broker_url,
            "RELAY_T_QUEUE": self.queue,
            "RELAY_T_BACKEND": self.backend,
            "RELAY_T_LEASE": self.lease,
            "RELAY_T_OUT": str(self.out),
            "RELAY_T_EVENTS": str(self.relay_events),
            "RELAY_T_JOBS": json.dumps(self.jobs),
            "RELAY_T_STORED": "1" if self.stored else "",
        }

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.procs.append((name, proc))
        return proc

    def worker(self, name: str, threads: int = 2, stop_ms: int = 20000) -> subprocess.Popen[bytes]:
        """Start ``dramatiq`` on the app module: one worker process with ``threads`` threads that
        waits ``stop_ms`` for running actors when stopped."""
        argv = [sys.executable, "-m", "dramatiq", self.app, "-p", "1"]
        argv += ["-t", str(threads), "--worker-shutdown-timeout", str(stop_ms)]
        return self._start(name, argv)

    def scheduler(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        """Start ``python -m relay_dramatiq`` on the app module with ``options``."""
        argv = [sys.executable, "-m", "relay_dramatiq", self.app, *options]
        return self._start(name, argv)

    def logs(self) -> str:
        """Every process's output, for failure messages."""
        parts = []
        for name, _ in self.procs:
            text = (self.tmp / f"{name}.log").read_text(errors="replace")
            parts.append(f"--- {name} ---\n{text[-6000:]}")
        return "\n".join(parts)

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` to the process and wait for it to exit; return its exit code."""
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"process did not stop on {sig}\n{self.logs()}") from None

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the process and every process it started (a ``dramatiq`` worker's children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def close(self) -> None:
        for _, proc in self.procs:
            self.kill(proc)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """What the actors reported, in order of appending."""
        if not self.out.exists():
            return []
        lines = [json.loads(line) for line in self.out.read_text().splitlines() if line]
        return [e for e in lines if kind is None or e["event"] == kind]

    def runs(self, job: str) -> list[RunRecord]:
        """The store's records of ``job``, oldest slot first."""
        backend = open_backend(self.backend)
        assert backend.capability == "lease"
        try:
            return sorted(backend.runs(job, limit=1000), key=lambda r: r.scheduled_for)
        finally:
            backend.close()

    def enqueued(self) -> list[str]:
        """Run ids the schedulers report enqueuing (with repeats, if any were enqueued twice).

        Read from the ``dispatched`` events the schedulers log (logger relay.events.dispatched).
        """
        marker = " relay.events.dispatched dispatched "
        ids = []
        for name, _ in self.procs:
            if name.startswith("scheduler"):
                for line in (self.tmp / f"{name}.log").read_text(errors="replace").splitlines():
                    if marker in line:
                        ids.append(line.split(marker, 1)[1].split(" ")[0])
        return ids

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float = 60) -> T:
        """Poll ``check`` until it returns something truthy; fail with every log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")
