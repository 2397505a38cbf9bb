"""Each event fires exactly once, in real standalone scheduler processes, seen in their JSON logs.

Every instance logs Relay's events as JSON lines to one file (``tests.support.event_log``); the
tests race, SIGKILL, SIGSTOP and restart real processes and a real store, then count the events.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from relay.backends import open_backend
from tests.support.backends import LEASE_BACKENDS
from tests.support.event_log import count, read_events
from tests.support.redis_server import own_redis
from tests.test_scheduler_processes import start, wait_for

pytestmark = pytest.mark.slow


class Instances:
    """Scheduler processes sharing one store, one runs log and one events log."""

    def __init__(self, tmp: Path, url: str, **options: Any) -> None:
        self.url, self.options = url, options
        self.log, self.path = tmp / "runs.log", tmp / "events.jsonl"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, **options: Any) -> str:
        """Start an instance; returns its owner name."""
        proc = start(name, self.url, self.log, events=str(self.path), **self.options, **options)
        self.procs[name] = proc
        return f"{name}:{proc.pid}"

    def events(self, kind: str | None = None, **where: Any) -> list[dict[str, Any]]:
        found = read_events(self.path, kind)
        return [e for e in found if all(e[f"relay_{k}"] == v for k, v in where.items())]

    def wait(self, what: str, kind: str, timeout: float = 60, **where: Any) -> dict[str, Any]:
        try:
            wait_for(lambda: self.events(kind, **where), timeout)
        except AssertionError:
            raise AssertionError(f"no {kind} event ({what}): {self.events()}") from None
        return self.events(kind, **where)[0]

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # its threads' stacks, to the captured stderr
            time.sleep(1)
            raise

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@contextmanager
def instances(tmp: Path, url: str, **options: Any) -> Iterator[Instances]:
    group = Instances(tmp, url, **options)
    try:
        yield group
    finally:
        group.close()


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("redis", marks=pytest.mark.redis)])
def race_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    factory, _ = LEASE_BACKENDS[request.param]
    with factory(tmp_path) as url:
        yield url


def test_racing_instances_report_each_run_won_once_and_lost_by_the_others(
    race_url: str, tmp_path: Path
) -> None:
    with instances(tmp_path, race_url, lease=5, heartbeat=1, every=1, work=0.1) as group:
        names = ["a", "b", "c"]
        owners = {group.start(name) for name in names}
        wait_for(lambda: owners <= {e["relay_owner"] for e in group.events()}, 30)
        up = time.time()  # every instance is deciding runs
        time.sleep(5)
        for name in names:
            group.stop(name)
    backend = open_backend(race_url)
    try:  # the loop also recorded each instance's own heartbeat (relay instances, relay health)
        assert {(i.owner, i.role) for i in backend.instances()} == {
            (owner, "scheduler") for owner in owners
        }
    finally:
        backend.close()
    events = group.events()
    decided = [e["relay_run_id"] for e in events if e["relay_event"] == "won"]
    # Runs whose slot came after every instance was up, and that had time to finish.
    runs = [r for r in decided if up + 1 < _slot(r) < up + 4]
    assert len(runs) >= 2, events
    for kind, times in {"won": 1, "dispatched": 1, "started": 1, "succeeded": 1, "lost": 2}.items():
        counted = count(events, kind)
        assert [counted[r] for r in runs] == [times] * len(runs), (kind, events)


def _never_beside_itself(group: Instances) -> None:
    """No instance took over a run from itself: one it still executes, it renews."""
    taken = group.events("taken_over")
    assert all(e["relay_owner"] != e["relay_previous_owner"] for e in taken), taken


def test_a_sigkilled_runners_run_is_taken_over_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with instances(tmp_path, url, lease=4, heartbeat=0.5, every=60, work=20) as group:
        dead = group.start("dead")
        started = group.wait("the first attempt", "started", owner=dead)
        backup = group.start("backup")
        time.sleep(1.5)  # the backup is up and sees the run held
        group.stop("dead", signal.SIGKILL)
        group.wait("the takeover", "taken_over")
        time.sleep(3)  # several more sweeps: none may take it over again
        group.stop("backup")
    # The run the dead instance started is taken over once. (When the test straddles a minute,
    # the dead instance may also have won the next slot: that run is taken over too, once.)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in group.events("taken_over"):
        by_run.setdefault(event["relay_run_id"], []).append(event)
    assert all(len(events) == 1 for events in by_run.values()), by_run
    [taken] = by_run[started["relay_run_id"]]
    _never_beside_itself(group)
    assert (taken["relay_owner"], taken["relay_previous_owner"]) == (backup, dead)
    assert (taken["relay_previous_attempt"], taken["relay_attempt"]) == (1, 2)
    assert taken["relay_token"] > started["relay_token"]
    assert taken["levelname"] == "WARNING" and taken["name"] == "relay.events.taken_over"
    # The backup's SIGTERM hands attempt 2 over.
    [handed] = group.events("handed_over", run_id=started["relay_run_id"])
    assert (handed["relay_owner"], handed["relay_attempt"]) == (backup, 2)


def test_a_sigstopped_runner_is_fenced_off_once_when_it_wakes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with instances(tmp_path, url, lease=4, heartbeat=0.5, every=60, work=8) as group:
        frozen = group.start("frozen")
        started = group.wait("the first attempt", "started", owner=frozen)
        group.start("other")
        time.sleep(1)
        group.procs["frozen"].send_signal(signal.SIGSTOP)
        group.wait("the takeover", "taken_over")
        group.procs["frozen"].send_signal(signal.SIGCONT)
        fenced = group.wait("the stale runner's refusal", "fenced_off")
        group.wait("the new attempt to end", "succeeded", run_id=started["relay_run_id"])
        time.sleep(1)
        group.stop("frozen")
        group.stop("other")
    assert len(group.events("fenced_off")) == 1
    _never_beside_itself(group)
    assert fenced["relay_owner"] == frozen and fenced["relay_token"] == started["relay_token"]
    assert fenced["relay_operation"] in ("heartbeat", "finish")
    succeeded = group.events("succeeded", run_id=started["relay_run_id"])
    assert [e["relay_attempt"] for e in succeeded] == [2]  # never the stale attempt


def test_overlapping_runs_are_reported_skipped_once_each(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    options = {"lease": 5, "heartbeat": 1, "every": 1, "work": 2.5, "overlap": "skip"}
    with instances(tmp_path, url, **options) as group:
        group.start("a")
        group.start("b")
        wait_for(lambda: len(group.events("skipped")) >= 3, 30)
        group.stop("a")
        group.stop("b")
    skipped = count(group.events(), "skipped")
    assert set(skipped.values()) == {1}
    assert {e["relay_reason"] for e in group.events("skipped")} == {"overlap"}
    assert not set(skipped) & set(count(group.events(), "won"))


def test_downtime_is_reported_missed_once_and_old_catch_up_slots_stale_once(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with instances(tmp_path, url, lease=5, heartbeat=1, every=1, work=0) as group:
        group.start("before")
        group.wait("a first run", "succeeded")
        group.stop("before")
        time.sleep(5)  # every instance is down for five slots and more
        owners = {group.start("a"), group.start("b")}
        # A won run of a or b: "before"'s first run is a won event too (a loaded machine can take
        # longer than the sleep below to start a Python process).
        wait_for(lambda: [e for e in group.events("won") if e["relay_owner"] in owners], 30)
        time.sleep(2)
        group.stop("a")
        group.stop("b")
    [missed] = group.events("missed")
    assert missed["relay_job"] == "job" and missed["relay_count"] >= 4
    assert missed["relay_first"] < missed["relay_last"]
    assert missed["levelname"] == "WARNING"

    (tmp_path / "stale").mkdir()
    with instances(
        tmp_path / "stale", url, lease=5, heartbeat=1, every=1, work=0, catch_up=3600,
        stale_after=5,
    ) as group:  # fmt: skip
        time.sleep(10)  # down again: these slots are caught up, the older ones too old to start
        group.start("c")
        group.start("d")
        group.wait("a run after the downtime", "won", timeout=30)
        time.sleep(2)
        group.stop("c")
        group.stop("d")
    stale = count(group.events(), "skipped")
    assert len(stale) >= 3 and set(stale.values()) == {1}
    assert {e["relay_reason"] for e in group.events("skipped")} == {"stale"}


@pytest.mark.redis
def test_a_store_restart_is_reported_unavailable_then_recovered_once_per_instance(
    tmp_path: Path,
) -> None:
    with own_redis(tmp_path) as server, instances(
        tmp_path, server.url, lease=5, heartbeat=0.5, every=1, work=0
    ) as group:  # fmt: skip
        owners = [group.start("a"), group.start("b")]
        group.wait("a run", "succeeded")
        wait_for(lambda: set(owners) <= {e["relay_owner"] for e in group.events()}, 30)
        server.kill()  # both instances are up and deciding
        for owner in owners:
            group.wait("the outage", "store_unavailable", owner=owner)
        time.sleep(4)  # several retries while it is down
        server.start()
        for owner in owners:
            group.wait("the recovery", "store_recovered", owner=owner)
        group.stop("a")
        group.stop("b")
    for kind in ("store_unavailable", "store_recovered"):
        assert sorted(e["relay_owner"] for e in group.events(kind)) == sorted(owners)
    down = group.events("store_unavailable")[0]
    assert down["levelname"] == "ERROR" and down["relay_backend"].startswith("Redis")
    assert all(e["relay_down_for"] >= 4 for e in group.events("store_recovered"))


def _slot(run_id: str) -> float:
    from relay.runs import parse_run_id

    return parse_run_id(run_id)[1].timestamp()


@pytest.mark.redis
def test_a_run_that_finished_while_the_store_was_down_is_recorded_once_it_is_back(
    tmp_path: Path,
) -> None:
    durable = ("--appendonly", "yes", "--appendfsync", "always")  # the run's record survives
    with own_redis(tmp_path, *durable) as server, instances(
        tmp_path, server.url, lease=4, heartbeat=0.5, every=60, work=2
    ) as group:  # fmt: skip
        runner = group.start("a")
        started = group.wait("the run", "started", owner=runner)
        backup = group.start("b")
        wait_up(server.url, backup)
        server.kill()  # while the handler works: its finish finds no store
        time.sleep(4 + 2)  # down for longer than the lease
        server.start()
        done = group.wait("the finish", "succeeded", run_id=started["relay_run_id"])
        group.wait("b sees the store back", "store_recovered")
        time.sleep(4 + 1.5)  # b's grace (one lease) is over: it sweeps again
        group.stop("a")
        group.stop("b")
    assert done["relay_owner"] == runner and done["relay_token"] == started["relay_token"]
    assert group.events("abandoned") == [] and group.events("taken_over") == []
    assert len(group.events("started", run_id=started["relay_run_id"])) == 1


@pytest.mark.redis
def test_a_finish_a_stopping_instance_could_not_record_is_abandoned_and_runs_again(
    tmp_path: Path,
) -> None:
    durable = ("--appendonly", "yes", "--appendfsync", "always")
    with own_redis(tmp_path, *durable) as server, instances(
        tmp_path, server.url, lease=4, heartbeat=0.5, every=60, work=2
    ) as group:  # fmt: skip
        runner = group.start("a")
        started = group.wait("the run", "started", owner=runner)
        backup = group.start("b")
        wait_up(server.url, backup)
        server.kill()  # while the handler works: its finish finds no store
        time.sleep(2 + 1)  # the handler is done: its finish is being retried
        group.stop("a")  # its stop_timeout (1 s) bounds the retries: the finish is given up
        abandoned = group.wait("the give-up", "abandoned", owner=runner)
        server.start()
        again = group.wait("the run again", "succeeded", run_id=started["relay_run_id"])
        group.stop("b")
    assert len(group.events("abandoned")) == 1
    assert abandoned["levelname"] == "ERROR"
    assert (abandoned["relay_operation"], abandoned["relay_outcome"]) == ("finish", "succeeded")
    assert abandoned["relay_token"] == started["relay_token"]
    # Nothing was recorded: the lease ran out and the run was taken over, and ran again.
    assert again["relay_attempt"] == 2
    taken = group.events("taken_over", run_id=started["relay_run_id"])
    assert len(taken) == 1 and taken[0]["relay_previous_owner"] == runner


def wait_up(url: str, owner: str) -> None:
    """Wait until the instance ``owner`` recorded its own heartbeat: its loop is stepping."""
    backend = open_backend(url)
    try:
        wait_for(lambda: any(i.owner == owner for i in backend.instances()), 30)
    finally:
        backend.close()
