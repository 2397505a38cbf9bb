"""Instances of two releases on one store, started and stopped as a deploy does, and what they ran.

Each instance is a real process running ``instance.py`` with its release's interpreter, writing its
own log file. The fleet records each change (who started, who stopped, when), so that a test can
count per instance and per phase what ran, and check every slot across the whole deploy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from relay.runs import parse_run_id
from tests.support.procs import ROOT

__all__ = ["Fleet", "Instance", "Run", "wait_for"]

SCRIPT = Path(__file__).with_name("instance.py")


@dataclass(frozen=True)
class Run:
    """One run an instance started: its job, slot, attempt, token, who, and when (the
    instance's clock)."""

    job: str
    slot: datetime
    attempt: int
    token: int
    owner: str
    at: float


@dataclass
class Instance:
    """One instance process of one release."""

    name: str
    release: str
    """``"old"`` (the previous release) or ``"new"`` (HEAD)."""
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    stopped: float | None = None
    killed: bool = False
    """Stopped with SIGKILL (a host that died during the deploy), not SIGTERM."""
    _read: list[list[Any]] = field(default_factory=list)
    _offset: int = 0
    _runs: list[Run] = field(default_factory=list)

    def lines(self, kind: str) -> list[list[Any]]:
        """Its log's complete lines of one kind, without the kind (read on from where the last
        call stopped: the tests poll these files)."""
        if self.log.exists():
            with self.log.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
            self._offset += len(complete)
            self._read += [json.loads(line) for line in complete.splitlines()]
        return [line[1:] for line in self._read if line[0] == kind]

    def runs(self) -> list[Run]:
        """The runs it started, in order."""
        lines = self.lines("run")
        self._runs += [
            Run(job, parse_run_id(run_id)[1], attempt, token, owner, at)
            for job, run_id, attempt, token, owner, at in lines[len(self._runs) :]
        ]
        return list(self._runs)

    @property
    def owner(self) -> str:
        """Its owner name, as its instance record and its leases show it."""
        return f"{self.name}:{self.proc.pid}"

    def own(self) -> list[Run]:
        """The runs of its own job, which no other instance runs."""
        return [r for r in self.runs() if r.job == f"own-{self.name}"]

    def raced(self) -> list[Run]:
        """The runs it won of the jobs every instance races for."""
        return [r for r in self.runs() if not r.job.startswith("own-")]

    @property
    def live(self) -> bool:
        return self.stopped is None and self.proc.poll() is None


@dataclass
class Fleet:
    """The instances of one test, on one store, with the interpreter of each release."""

    url: str
    folder: Path
    pythons: dict[str, Path]
    instances: dict[str, Instance] = field(default_factory=dict)
    phases: list[tuple[str, float]] = field(default_factory=list)
    """Each phase's name and when it began (``time.time()``), in order."""
    ended: float = 0.0
    """When the last phase ended: :meth:`stop_all` began."""

    def start(
        self, release: str, *names: str, timeout: float = 60, **options: Any
    ) -> list[Instance]:
        """Start instances of ``release`` together (``options`` for ``instance.py``, such as
        ``every``); wait until each has made its scheduler or has exited."""
        started = [self._spawn(release, name, options) for name in names]

        def waiting() -> list[str]:
            return [i.name for i in started if not i.lines("hello") and i.proc.poll() is None]

        wait_for(lambda: not waiting(), timeout, lambda: f"{waiting()} did not start")
        return started

    def _spawn(self, release: str, name: str, options: dict[str, Any]) -> Instance:
        log = self.folder / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if release == "new":  # HEAD's code, wherever the venv's editable install points
            env["PYTHONPATH"] = str(ROOT / "shared")
        args = {"name": name, "url": self.url, "log": str(log), **options}
        with (self.folder / f"{name}.stderr").open("wb") as stderr:
            proc = subprocess.Popen(
                [str(self.pythons[release]), str(SCRIPT), json.dumps(args)],
                cwd=self.folder, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        instance = self.instances[name] = Instance(name, release, proc, log, time.time())
        return instance

    def stop(self, name: str, timeout: float = 60, kill: bool = False) -> int:
        """SIGTERM an instance (a deploy's graceful stop), or SIGKILL it with ``kill`` (its host
        died), and wait for it; its exit code."""
        instance = self.instances[name]
        instance.stopped, instance.killed = time.time(), kill
        if instance.proc.poll() is None:
            instance.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            return instance.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            instance.proc.kill()
            return instance.proc.wait()

    def stop_all(self) -> None:
        """Stop every instance still running, all at once."""
        self.ended = time.time()
        running = [i for i in self.instances.values() if i.stopped is None]
        for instance in running:
            instance.stopped = time.time()
            if instance.proc.poll() is None:
                instance.proc.send_signal(signal.SIGTERM)
        for instance in running:
            try:
                instance.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                instance.proc.kill()
                instance.proc.wait()

    def phase(self, name: str) -> None:
        """A new phase of the deploy begins now."""
        self.phases.append((name, time.time()))

    def live(self) -> list[Instance]:
        return [i for i in self.instances.values() if i.live]

    def settle(self, runs: int = 2, timeout: float = 60) -> None:
        """Wait until every live instance has run its own job ``runs`` times in this phase.

        The phase lasts as long as that takes, not a fixed time; past ``timeout`` the test fails,
        naming who ran nothing (an instance that exits by itself fails it at once).
        """
        name, since = self.phases[-1]

        def idle() -> list[str]:
            return [i.name for i in self.live() if sum(r.at >= since for r in i.own()) < runs]

        def settled() -> bool:
            exited = [i.name for i in self.instances.values() if i.stopped is None and not i.live]
            assert not exited, f"{exited} exited by themselves in {name!r}"
            return not idle()

        wait_for(
            settled,
            timeout,
            lambda: f"{idle()} ran their own job less than {runs} times in {name!r}",
        )

    def runs(self) -> list[Run]:
        """Every run of every instance, in slot order."""
        found = [r for i in self.instances.values() for r in i.runs()]
        return sorted(found, key=lambda r: (r.job, r.slot, r.token))

    def spans(self) -> list[tuple[str, float, float]]:
        """Each phase's name, when it began and when it ended (the next began, or the fleet
        stopped; now if it has not)."""
        ends = [at for _, at in self.phases[1:]] + [self.ended or time.time()] * bool(self.phases)
        return [(name, begun, end) for (name, begun), end in zip(self.phases, ends, strict=True)]

    def runs_by_phase(self, own: bool) -> dict[str, dict[str, list[Run]]]:
        """Per phase, the runs each instance live in it started: of its own job (``own``), or
        the slots it won of the jobs all instances race for."""
        found: dict[str, dict[str, list[Run]]] = {}
        for name, begun, end in self.spans():
            alive = [
                i for i in self.instances.values()
                if i.started < begun and (i.stopped is None or i.stopped > begun)
            ]  # fmt: skip
            found[name] = {
                i.name: [r for r in (i.own() if own else i.raced()) if begun <= r.at < end]
                for i in alive
            }
        return found


def wait_for(predicate: Callable[[], object], timeout: float, what: object) -> None:
    """Poll ``predicate`` until it holds; past ``timeout`` fail, saying ``what`` (or its answer)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what() if callable(what) else what}")
        time.sleep(0.2)
