"""A failover race: real instance processes run a job every second while the store fails over.

Each instance is ``tests.support.instance`` (one job, every handler start and end logged with
its token and time). :func:`race` starts them, lets a callback fail the store over several times
while runs are in flight, stops them, and :func:`judge` reads what happened: per slot, how many
times its handler completed; tokens per run; and the time from each failover to the next run
that started. The Sentinel failover tests and ``bench/store_failover_redis.py`` share it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relay.runs import parse_run_id, run_id
from tests.support.event_log import read_events
from tests.support.procs import ROOT, stop_all

__all__ = ["RaceResult", "judge", "race"]

TIMING = {"lease": 4.0, "heartbeat": 0.5, "every": 1, "work": 0.4, "catch_up": 60}
"""The instances' settings: a job every second whose run takes 0.4 s, so runs are in flight
much of the time, and whose slots missed while the store is away run once it is back."""


@dataclass
class RaceResult:
    """What the instances did while the store failed over."""

    slots: int
    """Slots in the judged window (from the first run to a lease before the instances stopped)."""
    lost: list[str] = field(default_factory=list)
    """Runs of the window whose handler never completed."""
    doubled: list[str] = field(default_factory=list)
    """Runs of the window whose handler completed more than once."""
    tokens_back: list[str] = field(default_factory=list)
    """Runs whose attempts did not get growing tokens."""
    delays: list[float] = field(default_factory=list)
    """Seconds from each failover (the primary's kill) to the next run that started."""
    promotions: list[float] = field(default_factory=list)
    """Seconds from each kill to the promotion of the replica (Sentinel's share of the delay)."""
    abandoned: list[str] = field(default_factory=list)
    """Runs whose end an instance gave up recording (``abandoned`` events): the engine then lets
    the lease run out and the run is taken over and run again, by design."""
    stores_lost: list[str] = field(default_factory=list)
    """Doubled runs no instance reported abandoned: the store forgot a step it had confirmed."""
    late: list[str] = field(default_factory=list)
    """Runs of the window not done when the race settled, done later (taken over: see
    :func:`race`)."""

    def summary(self) -> str:
        """One line for a report."""
        delays = ", ".join(f"{d:.2f}" for d in self.delays)
        promotions = ", ".join(f"{p:.2f}" for p in self.promotions)
        return (
            f"{self.slots} slots: lost {len(self.lost)} {self.lost[:5]}, doubled "
            f"{len(self.doubled)} {self.doubled[:5]} ({len(self.stores_lost)} of them forgotten "
            f"by the store, the others abandoned), tokens back {len(self.tokens_back)}, abandoned "
            f"{len(self.abandoned)}, late {len(self.late)} {self.late[:5]}; kill -> promotion (s): "
            f"{promotions}; kill -> next start (s): {delays}"
        )


@contextmanager
def _instances(url: str, folder: Path, count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` instance processes; SIGTERMed (SIGKILLed if they hang) afterwards."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    procs = []
    try:
        for index in range(count):
            args = {
                "name": f"i{index}", "url": url, "log": str(folder / "runs.log"),
                "events": str(folder / "events.jsonl"), "max_attempts": 10, **TIMING,
            }  # fmt: skip
            command = [sys.executable, "-m", "tests.support.instance", json.dumps(args)]
            with (folder / f"i{index}.err").open("wb") as err:
                procs.append(
                    subprocess.Popen(
                        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err
                    )
                )
        yield procs
    finally:
        stop_all(procs)


def race(
    url: str,
    folder: Path,
    failovers: Sequence[Callable[[], tuple[float, float]]],
    settle: float = 4.0,
) -> RaceResult:
    """Run 3 instances on ``url``; call each of ``failovers`` once runs are under way (each
    returns the ``time.time()`` of its kill and the seconds to the promotion), then let them
    settle (and finish the runs of the window taken over late) and judge the log."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "runs.log"
    kills = []
    with _instances(url, folder, 3) as procs:
        deadline = time.monotonic() + 60
        while len(_lines(log)) < 6:  # a few runs done: every instance is up and ticking
            assert time.monotonic() < deadline, _errors(folder)
            assert all(p.poll() is None for p in procs), _errors(folder)
            time.sleep(0.1)
        for fail_over in failovers:
            time.sleep(2.3)  # a moment between slots: a run is in flight at most failovers
            kills.append(fail_over())
        time.sleep(settle)
        end = time.time() - TIMING["lease"] - 2
        # A step the store did but whose reply the kill lost (an acquire, a start) leaves a lease
        # its instance does not know it holds: the run is taken over once the lease runs out and
        # the grace after the outage (one lease) has passed. It is late, not lost: wait for it.
        late = judge(_lines(log), [], end, []).lost
        deadline = time.monotonic() + 2 * TIMING["lease"] + 4
        while judge(_lines(log), [], end, []).lost and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(p.poll() is None for p in procs), _errors(folder)
    abandoned = [e["relay_run_id"] for e in read_events(folder / "events.jsonl", "abandoned")]
    result = judge(_lines(log), [kill for kill, _ in kills], end, abandoned)
    result.promotions = [promoted for _, promoted in kills]
    result.late = [run for run in late if run not in result.lost]
    return result


def judge(
    lines: list[list[Any]], kills: list[float], end: float, abandoned: list[str]
) -> RaceResult:
    """Judge the log: every slot from the first started to ``end`` must complete once."""
    done: Counter[str] = Counter(line[0] for line in lines if line[4] == "done")
    tokens: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        if line[4] == "start":
            tokens[line[0]].append(line[2])
    first = min(_slot(run) for run in tokens)
    job = next(iter(tokens)).rpartition("@")[0]
    window = [_run_id(job, slot) for slot in range(int(first) + 1, int(end))]
    result = RaceResult(len(window), abandoned=abandoned)
    result.lost = [run for run in window if done[run] == 0]
    result.doubled = [run for run in window if done[run] > 1]
    result.stores_lost = [run for run in result.doubled if run not in abandoned]
    result.tokens_back = [run for run, seen in tokens.items() if seen != sorted(set(seen))]
    starts = sorted(line[5] for line in lines if line[4] == "start")
    for kill in kills:
        later = [at for at in starts if at > kill]
        result.delays.append(later[0] - kill if later else float("inf"))
    return result


def _slot(run: str) -> float:
    return parse_run_id(run)[1].timestamp()


def _run_id(job: str, second: int) -> str:
    return run_id(job, datetime.fromtimestamp(second, timezone.utc))


def _lines(log: Path) -> list[list[Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _errors(folder: Path) -> str:
    return "\n".join(p.read_text()[-2000:] for p in sorted(folder.glob("i*.err")))
