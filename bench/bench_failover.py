"""Failover as a distribution: SIGKILL (and SIGTERM) the runner of a run, time the next start.

For each lease backend (SQLite, PostgreSQL, Redis, NATS KV) it keeps two standalone instances
running one job whose run never ends, then ``N`` times (default 100): waits a random moment into
the run, kills the instance running it, and times kill -> the run's next start by another
instance (the surviving instance writes the time it started the run). A fresh instance replaces
the dead one before the next round, so two are always there. Then the same for a graceful stop
(SIGTERM: the instance hands the run over). It prints p50, p99 and max against the bound
``lease + heartbeat + tick`` for a kill, and against 0.5 s for a hand-over (a handed-over run is
taken at the next sweep, which runs every ``heartbeat``, so ``heartbeat + tick`` plus the signal
handling and the hand-over write).

    python bench/bench_failover.py [--kills 100] [--lease 1] [--heartbeat 0.25] [--tick 0.1]
                                   [--only sqlite postgres redis nats_kv]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.stores import store  # noqa: E402
from bench.table import Row, at_most  # noqa: E402


@dataclass(frozen=True)
class Timing:
    """The instances' settings (seconds)."""

    lease: float
    heartbeat: float
    tick: float


class Cluster:
    """Instance processes sharing one store and one log file."""

    def __init__(self, url: str, timing: Timing, folder: Path) -> None:
        self.log = folder / "starts.log"
        self.log.touch()
        self.args = {"url": url, "log": str(self.log), **timing.__dict__}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.errors = folder / "instances.err"

    def spawn(self) -> None:
        """Start one more instance and wait until it is about to tick."""
        with self.errors.open("ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.failover_instance", json.dumps(self.args)],
                cwd=ROOT,
                stderr=err,
            )
        self.procs[proc.pid] = proc
        self.wait_for(lambda lines: f"ready {proc.pid}" in lines, 60)

    def lines(self) -> list[str]:
        """Every line written so far."""
        return self.log.read_text().splitlines()

    def starts(self) -> list[tuple[int, float]]:
        """``(pid, time)`` of every start so far, in order."""
        found = []
        for line in self.lines():
            if line.startswith("start "):
                _, pid, _, at = line.split()
                found.append((int(pid), float(at)))
        return found

    def wait_for(self, check: object, timeout: float) -> None:
        """Poll the log until ``check(lines)`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check(self.lines()):  # type: ignore[operator]
                return
            if any(proc.poll() not in (None, -signal.SIGKILL, 0) for proc in self.procs.values()):
                break
            time.sleep(0.005)
        codes = {pid: proc.poll() for pid, proc in self.procs.items()}
        raise RuntimeError(
            f"timed out or an instance failed (exit codes by pid, None: running: {codes}); "
            f"their errors:\n{self.errors.read_text()[-3000:]}"
        )

    def round(self, sig: signal.Signals) -> float:
        """Stop the runner with ``sig``; seconds from the signal to the next start elsewhere."""
        count = len(self.starts())
        pid = self.starts()[-1][0]
        killed_at = time.time()
        os.kill(pid, sig)
        self.wait_for(lambda _: len(self.starts()) > count, 60)
        new_pid, started_at = self.starts()[count]
        if new_pid == pid:
            raise RuntimeError("the stopped instance started the run again")
        self.procs.pop(pid).wait(30)
        return started_at - killed_at

    def stop(self) -> None:
        """SIGKILL every instance."""
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


def distribution(url: str, timing: Timing, rounds: int, sig: signal.Signals) -> list[float]:
    """``rounds`` stops of the runner by ``sig``: seconds to the next start, one per round."""
    with tempfile.TemporaryDirectory(prefix="relay-failover-") as folder:
        cluster = Cluster(url, timing, Path(folder))
        try:
            cluster.spawn()
            cluster.spawn()
            cluster.wait_for(lambda lines: any(x.startswith("start ") for x in lines), 60)
            delays = []
            for _ in range(rounds):
                # A random moment into the run, so kills land anywhere between two heartbeats.
                time.sleep(random.uniform(0.05, timing.lease))
                delays.append(cluster.round(sig))
                cluster.spawn()
            return delays
        finally:
            cluster.stop()


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p99 and max."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99, ordered[-1]


BACKENDS = ["sqlite", "postgres", "redis", "nats_kv"]


def measure(name: str, timing: Timing, kills: int) -> list[Row]:
    """Rows for one backend: the kill and the graceful-stop distributions."""
    out = []
    kill_bound = timing.lease + timing.heartbeat + timing.tick
    # A handed-over run waits for the next sweep (every heartbeat) and tick; the stopping instance
    # first handles the signal and writes the hand-over: "well under a second".
    stop_bound = max(0.5, timing.heartbeat + timing.tick + 0.15)
    for label, sig, bound in (
        ("SIGKILL", signal.SIGKILL, kill_bound),
        ("SIGTERM", signal.SIGTERM, stop_bound),
    ):
        with store(name) as url:
            delays = distribution(url, timing, kills, sig)
        p50, p99, worst = percentiles(delays)
        settings = f"lease {timing.lease:g} s, heartbeat {timing.heartbeat:g}, tick {timing.tick:g}"
        figure = (
            f"{name}: {label} -> next start, {len(delays)}x ({settings}): "
            f"p50 {p50:.3f} s, p99 {p99:.3f} s; max"
        )
        out.append(Row("failover", figure, worst, "s", None, "", f"<= {bound:g} s", at_most(bound)))
        print(figure, f"{worst:.3f} s", file=sys.stderr, flush=True)
    return out


def rows(quick: bool = False) -> list[Row]:
    """The table rows for every lease backend (``quick``: 15 rounds instead of 100)."""
    timing = Timing(lease=1.0, heartbeat=0.25, tick=0.1)
    out = []
    for name in BACKENDS:
        out += measure(name, timing, 15 if quick else 100)
    try:
        from bench import failover_celery
    except ImportError:
        return out
    return out + failover_celery.rows(quick)


def main() -> None:
    """Run the chosen backends and print their distributions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--heartbeat", type=float, default=0.25)
    parser.add_argument("--tick", type=float, default=0.1)
    parser.add_argument("--only", nargs="*", choices=BACKENDS, default=BACKENDS)
    args = parser.parse_args()
    timing = Timing(args.lease, args.heartbeat, args.tick)
    for name in args.only:
        for row in measure(name, timing, args.kills):
            print(f"{row.figure} {row.value:.3f} s (target {row.target}, met: {row.met})")


if __name__ == "__main__":
    main()
