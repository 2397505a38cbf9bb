"""Instances racing on a PostgreSQL pair whose primary is killed, again and again, mid-run.

:func:`race` starts three real instance processes (``tests.backends.pg_procs
failover-instance``: a job every second, each run half a second long, catch-up on) on the pair's
multi-host URL. Each round waits for a run in flight, SIGKILLs the primary, promotes the standby
and rebuilds the dead server as the new standby, then waits for the next started run and a few
more. ``lag`` then holds the standby that many seconds behind (its WAL sender stopped) before the
kill: on an asynchronous pair the commits of that lag are what the promotion loses, on a
synchronous one they wait (and fail with the primary) instead. ``down`` waits that many seconds
between the kill and the promotion, as a failover manager takes time to notice. What happened is
a :class:`RaceReport`; the test asserts on it, the benchmark counts it.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from relay import RunState, open_backend
from relay.runs import parse_run_id
from tests.backends import pg_procs
from tests.support import procs
from tests.support.pg_standby import PgPair

__all__ = ["Failover", "RaceReport", "Timing", "race"]

JOB = "every-second"


@dataclass(frozen=True)
class Timing:
    """The instances' settings, in seconds."""

    lease: float = 10.0
    heartbeat: float = 1.0
    work: float = 0.5
    catch_up: float = 60.0
    pool_timeout: float = 5.0
    """How long a step waits for a connection while the store is away (given in the URL)."""


@dataclass
class Failover:
    """One round, on ``time.time``."""

    killed_at: float
    promoted_at: float
    rebuilt_at: float
    next_start_at: float = 0.0

    @property
    def to_next_start(self) -> float:
        """Seconds from the primary's kill to the next run a handler started."""
        return self.next_start_at - self.killed_at

    @property
    def after_rebuilt(self) -> float:
        """Seconds from the pair being whole again (a standby streaming) to that start."""
        return self.next_start_at - self.rebuilt_at


@dataclass
class RaceReport:
    """Every execution the instances logged, every round, and what the store kept."""

    executions: list[dict[str, Any]]
    failovers: list[Failover]
    stopped_at: float
    records: dict[str, tuple[RunState, int]] = field(default_factory=dict)
    """The store's state and token of each run at the end (the last promoted primary's)."""

    def starts(self) -> Counter[str]:
        """How many times each run's handler started."""
        return Counter(e["run"] for e in self.executions if "start" in e)

    @property
    def doubled(self) -> list[str]:
        """Runs whose handler started more than once."""
        return sorted(run for run, n in self.starts().items() if n > 1)

    @property
    def unfinished(self) -> list[str]:
        """Runs whose handler started but never returned (none should: no instance is killed)."""
        ended = Counter(e["run"] for e in self.executions if "end" in e)
        return sorted(run for run, n in self.starts().items() if ended[run] < n)

    @property
    def lost(self) -> list[str]:
        """Slots between the first run and two seconds before the stop that no handler ran."""
        slots = sorted(parse_run_id(run)[1] for run in self.starts())
        if not slots:
            return []
        ran = {parse_run_id(run)[1] for run in self.starts()}
        last = datetime.fromtimestamp(self.stopped_at - 2, slots[0].tzinfo)
        missing, slot = [], slots[0]
        while slot <= last:
            if slot not in ran:
                missing.append(slot.isoformat())
            slot += timedelta(seconds=1)
        return missing

    @property
    def forgotten(self) -> list[str]:
        """Runs a handler completed that the final store does not show succeeded with its token."""
        done = {(e["run"], e["token"]) for e in self.executions if "end" in e}
        return sorted(
            run for run, token in done if self.records.get(run) != (RunState.SUCCEEDED, token)
        )

    def token_regressions(self, timing: Timing) -> list[str]:
        """Runs acquired after a kill whose token is not above every token used before it.

        A start logged more than ``pool_timeout + 2`` s after the kill was acquired after it
        (a runner starts a won run at once, and a start waits at most ``pool_timeout``).
        """
        found = []
        for failover in self.failovers:
            before = [
                e["token"] for e in self.executions if e.get("start", 1e18) < failover.killed_at
            ]
            after_kill = failover.killed_at + timing.pool_timeout + 2
            for e in self.executions:
                if e.get("start", 0) > after_kill and before and e["token"] <= max(before):
                    found.append(f"{e['run']} token {e['token']} <= {max(before)}")
        return found


def race(
    pair: PgPair,
    folder: Path,
    *,
    failovers: int,
    lag: float = 0.0,
    down: float = 0.0,
    settle: int = 3,
    timing: Timing | None = None,
) -> RaceReport:
    """Run three instances through ``failovers`` rounds; what they did and what the store kept."""
    timing = timing or Timing()
    url = f"{pair.url}?schema=relay_race&pool_timeout={timing.pool_timeout:g}"
    if pair.synchronous:
        url += "&require_sync=1"
    open_backend(url).close()  # the schema, once, before the instances race for it
    log = folder / "executions.jsonl"
    log.touch()
    options = {"url": url, "log": str(log), **timing.__dict__}
    del options["pool_timeout"]
    instances = [
        pg_procs.spawn("failover-instance", {**options, "owner": f"i{n}"}, folder / f"i{n}.err")
        for n in range(3)
    ]
    rounds: list[Failover] = []
    try:
        for proc in instances:
            assert procs.next_event(proc)["event"] == "ready"
        _wait(log, lambda lines: _ended(lines) >= settle, 60, "the first runs")
        for _ in range(failovers):
            rounds.append(_one_round(pair, log, lag, down, settle))
        with suppress(AssertionError):  # what is still missing then is reported as lost
            _wait(log, _caught_up, 30, "catch-up")
        for proc in instances:
            proc.send_signal(signal.SIGTERM)
        stopped_at = time.time()
        for proc in instances:
            proc.wait(timeout=60)
            assert proc.returncode == 0, _errors(folder)
    finally:
        for proc in instances:
            procs.kill(proc)  # those still running; every pipe closed
    report = RaceReport(_lines(log), rounds, stopped_at)
    reader = open_backend(url, read_only=True)
    assert reader.capability == "lease"
    report.records = {r.id: (r.state, r.token) for r in reader.runs(JOB, limit=100_000)}
    reader.close()
    return report


def _one_round(pair: PgPair, log: Path, lag: float, down: float, settle: int) -> Failover:
    """Wait for a run in flight, fail the store over under it, wait for the runs after."""
    _wait(log, _in_flight, 30, "a run in flight")
    if lag:
        pair.pause_wal_sender()
        time.sleep(lag)  # the standby falls behind; commits wait for it only if synchronous
    killed_at = time.time()
    pair.kill_primary()
    time.sleep(down)  # a failover manager's detection time
    pair.promote()
    promoted_at = time.time()
    pair.rebuild()
    failover = Failover(killed_at, promoted_at, time.time())
    _wait(log, lambda lines: any(e.get("start", 0) > killed_at for e in lines), 90, "a start")
    failover.next_start_at = min(e["start"] for e in _lines(log) if e.get("start", 0) > killed_at)
    _wait(log, lambda lines: _ended(lines, after=killed_at) >= settle, 60, "runs after it")
    with suppress(AssertionError):  # the store stays up until the outage's slots have run
        _wait(log, _caught_up, 30, "catch-up")
    return failover


def _lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def _ended(lines: list[dict[str, Any]], after: float = 0.0) -> int:
    """How many runs that started after ``after`` have ended."""
    started = {e["run"] for e in lines if e.get("start", 0) > after}
    return sum(1 for e in lines if "end" in e and e["run"] in started)


def _caught_up(lines: list[dict[str, Any]]) -> bool:
    """Whether every slot from the first run's to two seconds ago has a run that started."""
    ran = {parse_run_id(e["run"])[1] for e in lines if "start" in e}
    if not ran:
        return False
    slot, last = min(ran), datetime.fromtimestamp(time.time() - 2, min(ran).tzinfo)
    while slot <= last:
        if slot not in ran:
            return False
        slot += timedelta(seconds=1)
    return True


def _in_flight(lines: list[dict[str, Any]]) -> bool:
    started = Counter(e["run"] for e in lines if "start" in e)
    ended = Counter(e["run"] for e in lines if "end" in e)
    return any(started[run] > ended[run] for run in started)


def _wait(log: Path, check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check(_lines(log)):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {timeout}s")


def _errors(folder: Path) -> str:
    return "\n".join(path.read_text()[-2000:] for path in sorted(folder.glob("i*.err")))
