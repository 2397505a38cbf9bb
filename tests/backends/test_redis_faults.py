"""Redis lease faults with real processes: a server restart mid-run, and clocks an hour off.

Each instance is a real process (``tests.backends.redis_instance``) running a Scheduler; every run
writes through a fence with its token, so the tests see what a resource that checks tokens sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import redis_lease
from tests.support.redis_server import own_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def spawn(tmp_path: Path, owner: str, **args: Any) -> tuple[subprocess.Popen[bytes], Path]:
    """Start one instance; its events go to a file."""
    out = tmp_path / f"{owner}.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    defaults = {"lease": 5.0, "heartbeat": 1.0, "tick": 0.2, "fence_db": str(tmp_path / "fence.db")}
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.backends.redis_instance",
             json.dumps({**defaults, **args, "owner": owner})],
            stdout=sink, stderr=subprocess.PIPE, cwd=ROOT, env=env,
        )  # fmt: skip
    return proc, out


def stop(instances: list[tuple[subprocess.Popen[bytes], Path]]) -> list[dict[str, Any]]:
    """SIGTERM every instance, wait for a clean exit, return all their events."""
    for proc, _ in instances:
        proc.send_signal(signal.SIGTERM)
    events = []
    for proc, out in instances:
        try:
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, stderr.decode()[-3000:]
        lines = out.read_text().splitlines()
        assert json.loads(lines[-1])["event"] == "stopped", lines[-3:]
        events += [json.loads(line) for line in lines]
    return events


def wait_ready(instances: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    deadline = time.monotonic() + 60
    for proc, out in instances:
        while not out.read_text().startswith('{"event": "ready"'):
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "an instance never got ready"
            time.sleep(0.05)


def writes_by_run(events: list[dict[str, Any]]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    runs: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for event in events:
        if event["event"] == "write":
            runs[event["run"]][event["token"]].append(event)
    return runs


def done_tokens(writes: dict[int, list[dict[str, Any]]]) -> set[int]:
    """Tokens whose final write the fence applied: the run's winners as the resource sees them."""
    return {
        token for token, items in writes.items() if any(w["done"] and w["applied"] for w in items)
    }


@pytest.fixture
def processes() -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    yield started
    for proc, _ in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_restart_mid_run_gives_no_second_winner_and_instances_carry_on(
    tmp_path: Path, processes: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    every, steps, step_time = 6, 16, 0.5  # a run takes 7.5 s: the restart always catches one
    with own_redis(tmp_path) as server:
        for n in range(3):
            processes.append(
                spawn(tmp_path, f"i{n}", url=server.url, jobs=["a", "b"], every=every,
                      steps=steps, step_time=step_time)
            )  # fmt: skip
        wait_ready(processes)
        # Restart 0.8 s into a slot and stay down longer than a sweep period, so every instance
        # notices and re-reads the store. Back within about 4 s, they find the slot still the
        # latest and unknown (the server forgot it), and lease it again while its first runner
        # still writes.
        time.sleep(every - time.time() % every + every + 0.8)
        down_at = time.time()
        server.restart(down_for=1.5)
        up_at = time.time()
        time.sleep(2 * every)
        events = stop(processes)
    runs = writes_by_run(events)
    began = {
        (run, t): min(w["at"] for w in items) for run, ws in runs.items() for t, items in ws.items()
    }
    old = {key for key, at in began.items() if at < down_at}  # leases from before the restart
    new = {key for key, at in began.items() if at > up_at}
    assert old and len({run for run, _ in new}) >= 4, sorted(runs)
    # No run has two winners, as a resource that checks tokens sees it.
    for run, writes in runs.items():
        assert len(done_tokens(writes)) <= 1, (run, writes)
    # Tokens leased after the restart are above every older one, so the fence never refuses them.
    for run, token in new:
        assert all(w["applied"] for w in runs[run][token]), (run, token, runs[run])
        assert all(token > t for r, t in old if r == run)
    # The runs under way at the restart were leased again; their first runner was fenced out.
    taken_over = {run for run, _ in old} & {run for run, _ in new}
    assert taken_over, sorted(runs)
    for run in taken_over:
        first = [w for t, items in runs[run].items() if (run, t) in old for w in items]
        assert any(not w["applied"] for w in first), first
        assert done_tokens(runs[run]) == {max(runs[run])}
    # The instances reconnected by themselves: runs after the restart finished, once each.
    for run in {run for run, _ in new} - taken_over:
        assert len(done_tokens(runs[run])) == 1, (run, runs[run])


def test_clocks_an_hour_off_give_no_second_winner(
    tmp_path: Path, processes: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    with redis_lease(tmp_path) as url:
        common = {"url": url, "jobs": ["a", "b", "c"], "every": 1, "steps": 3, "step_time": 0.5}
        # The early instance ticks fastest so it wins many runs; its leases would look expired to
        # everyone at once if its own clock wrote their expiry. (At equal tick rates, whichever
        # instance happened to tick just after each second could win every run.)
        processes.append(spawn(tmp_path, "early", shift=-3600, tick=0.02, lease=10, **common))
        processes.append(spawn(tmp_path, "late", shift=3600, tick=0.05, lease=10, **common))
        processes.append(spawn(tmp_path, "right", tick=0.2, lease=10, **common))
        wait_ready(processes)
        time.sleep(8)
        events = stop(processes)
    runs = writes_by_run(events)
    assert len(runs) >= 12, sorted(runs)
    owners = {w["owner"] for writes in runs.values() for items in writes.values() for w in items}
    assert "early" in owners, owners
    for run, writes in runs.items():
        assert len(writes) == 1, (run, writes)  # one lease per run: nobody took one over
        ((_, items),) = writes.items()
        assert all(w["applied"] for w in items) and items[-1]["done"], (run, items)
