"""Instances racing on a Redis Cluster while it fails over, and what they logged: for the
failover tests and ``bench/store_failover_cluster.py``.

Three real instance processes (:mod:`tests.support.cluster_instance`) run one job every second
on a fresh cluster of three primaries with a replica each; the primary serving the job's slot is
SIGKILLed and its replica promoted, ``failovers`` times. A fourth instance starts after the last
failover (a deploy): it reads the job's history from the new primaries and catches up every slot
it finds unrecorded, so a lost record shows as a run done twice.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relay import open_backend
from relay.backends._redis import job_base
from relay.contract import LeaseBackend
from relay.runs import run_id
from tests.support.procs import stop_all
from tests.support.redis_cluster import Failover, own_redis_cluster_with_replicas

__all__ = ["FINISH_TRIES", "JOB", "Race", "race"]

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc
JOB = "every-second"
INSTANCE = {"lease": 10.0, "heartbeat": 1.0, "work": 0.3, "every": 1, "catch_up": 60}
FINISH_TRIES = 7
"""A finish is sent 7 times (0.5 to 16 s apart, 31 s in all): enough to outlast a failover."""
SETTLE = 15.0
"""Seconds the instances run after the last failover, so every slot before it runs."""


@dataclass(frozen=True)
class Race:
    """What the instances logged while the store failed over, and what the store held after."""

    lines: list[dict[str, Any]]
    failovers: list[Failover]
    window: list[str]
    """The ids of every slot from the first failover's start to the last one's end."""
    records: dict[str, str]
    """The state of each run the store holds at the end, by id."""

    def done(self) -> Counter[str]:
        """How many times each run's handler completed."""
        return Counter(line["run"] for line in self.lines if line["event"] == "done")

    def lost(self) -> list[str]:
        """Slots of the window whose handler never completed."""
        done = self.done()
        return [run for run in self.window if done[run] == 0]

    def doubled(self) -> list[str]:
        """Runs whose handler completed more than once."""
        return sorted(run for run, count in self.done().items() if count > 1)

    def unrecorded(self) -> list[str]:
        """Runs whose handler completed but which the store does not hold as succeeded."""
        return sorted(run for run in self.done() if self.records.get(run) != "succeeded")

    def starts(self) -> list[dict[str, Any]]:
        """Every start, in the order of the time each instance logged it."""
        return sorted((line for line in self.lines if line["event"] == "start"), key=_at)

    def next_run_delays(self) -> list[float]:
        """Per failover, seconds from the kill to the first run started after it."""
        starts = self.starts()
        return [
            min((s["at"] for s in starts if s["at"] > f.killed_at), default=float("inf"))
            - f.killed_at
            for f in self.failovers
        ]

    def summary(self) -> str:
        """Slots, lost, doubled, unrecorded, the next-run delays; then a line per failover."""
        delays = self.next_run_delays()
        rows = [
            f"  kill -> promoted {f.promoted_at - f.killed_at:.2f} s, old node synced "
            f"{f.rejoined_at - f.killed_at:.2f} s, next run {delay:.2f} s"
            for f, delay in zip(self.failovers, delays, strict=True)
        ]
        return "\n".join([
            f"{len(self.failovers)} failovers, {len(self.window)} slots: lost "
            f"{len(self.lost())}, run twice {len(self.doubled())}, done but not recorded "
            f"succeeded {len(self.unrecorded())}; failover -> next run p50 "
            f"{statistics.median(delays):.2f} s, max {max(delays):.2f} s",
            *rows,
        ])  # fmt: skip


def _at(line: dict[str, Any]) -> float:
    return float(line["at"])


def race(folder: Path, query: str, *, failovers: int, lag: float, pause: float = 3.0) -> Race:
    """Three instances on a fresh cluster (URL options ``query``), ``failovers`` failovers of the
    job's primary ``pause`` seconds apart, each with the replica ``lag`` seconds behind."""
    with own_redis_cluster_with_replicas(folder / "nodes") as nodes:
        prefix = f"relay_f_{secrets.token_hex(4)}:"
        url = f"{nodes.url}?cluster=yes&prefix={prefix}{query}"
        procs = [_spawn(folder, url, f"i{n}") for n in range(3)]
        try:
            _wait_ready(folder, procs)
            time.sleep(pause)
            began, done = time.time(), []
            for _ in range(failovers):
                done.append(nodes.fail_over(job_base(prefix, JOB), lag=lag))
                time.sleep(pause)
            ended = time.time()
            procs.append(_spawn(folder, url, "late"))
            time.sleep(SETTLE)
            window = [
                run_id(JOB, datetime.fromtimestamp(second, UTC))
                for second in range(int(began) + 1, int(ended))
            ]
            # A step done whose reply a failover lost (an acquire, a start) leaves a lease its
            # instance does not know it holds: that run is taken over once the lease has run out
            # and the grace after the outage (one lease) has passed. Late, not lost: wait for it.
            deadline = time.monotonic() + 2 * INSTANCE["lease"] + 5
            while Race(_read(folder), done, window, {}).lost() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop_all(procs)  # a run in flight finishes first: a SIGTERM waits for it
        backend = open_backend(url)
        assert isinstance(backend, LeaseBackend)
        records = {r.id: r.state.value for r in backend.runs(JOB, limit=10_000)}
        backend.close()
    return Race(_read(folder), done, window, records)


def _spawn(folder: Path, url: str, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    args = {
        **INSTANCE, "url": url, "name": name, "job": JOB, "log": str(folder / "runs.jsonl"),
        "finish_tries": FINISH_TRIES,
    }  # fmt: skip
    with (folder / f"{name}.err").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.cluster_instance", json.dumps(args)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def _wait_ready(folder: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    while sum(line["event"] == "ready" for line in _read(folder)) < len(procs):
        assert all(p.poll() is None for p in procs), (folder / "i0.err").read_text()[-3000:]
        assert time.monotonic() < deadline, "the instances never started"
        time.sleep(0.1)


def _read(folder: Path) -> list[dict[str, Any]]:
    path = folder / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
