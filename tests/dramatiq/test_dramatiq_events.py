"""Relay's events from real ``relay-dramatiq`` schedulers and ``dramatiq`` workers, each once.

Every process logs the events as JSON lines (``RELAY_T_EVENTS``); the deciding events must come
from the schedulers, the running events from the workers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from relay.runs import parse_run_id
from tests.dramatiq.procs import Deployment
from tests.dramatiq.test_processes import _redis_broker, combos, deploy, settled
from tests.support.backends import unique
from tests.support.event_log import count, read_events
from tests.support.redis_server import own_redis
from tests.support.slots import one_slot_behind

__all__ = ["deploy"]  # the fixture, used through the parametrization below

pytestmark = pytest.mark.slow


def relay_events(d: Deployment, kind: str | None = None) -> list[dict[str, Any]]:
    return read_events(d.relay_events, kind)


def pids(d: Deployment, kind: str) -> set[int]:
    return {e["process"] for e in relay_events(d, kind)}


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_racing_schedulers_report_each_run_won_once_dispatched_once_and_run_once(
    deploy: Any,
) -> None:
    d: Deployment = deploy({"tick": {"every": 1, "sleep": 0.1, "catch_up": 3}})
    d.worker("worker", threads=4)
    schedulers = {d.scheduler(f"scheduler{i}").pid for i in range(2)}
    d.wait_for("both schedulers to decide", lambda: pids(d, "won") | pids(d, "lost") >= schedulers)
    up = time.time()
    d.wait_for("runs after that", lambda: time.time() > up + 5 and len(d.events("done")) >= 5)
    events = relay_events(d)
    window = [r for r in count(events, "won") if up + 1 < parse_run_id(r)[1].timestamp() < up + 4]
    assert len(window) >= 2, events
    for kind, times in {"won": 1, "lost": 1, "dispatched": 1, "started": 1, "succeeded": 1}.items():
        counted = count(events, kind)
        assert [counted[r] for r in window] == [times] * len(window), (kind, events)
    for kind in ("won", "lost", "dispatched"):
        assert pids(d, kind) <= schedulers, kind
    for kind in ("started", "succeeded"):
        assert not pids(d, kind) & schedulers, kind


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_a_killed_workers_run_is_reported_taken_over_once(deploy: Any) -> None:
    d: Deployment = deploy({"slow": {**one_slot_behind(), "sleep_first": 60}})
    first = d.worker("worker-a", threads=1)
    scheduler = d.scheduler("scheduler")
    d.wait_for("attempt 1 to start", lambda: relay_events(d, "started"))
    d.kill(first)
    d.worker("worker-b", threads=2)
    d.wait_for("the run to succeed", lambda: settled(d, "slow"))
    time.sleep(1.5)  # more sweeps: none may report it again
    [started, restarted] = relay_events(d, "started")
    [taken] = relay_events(d, "taken_over")
    assert taken["process"] == scheduler.pid
    assert (taken["relay_previous_owner"], taken["relay_previous_attempt"]) == (
        started["relay_owner"], 1,
    )  # fmt: skip
    assert restarted["relay_attempt"] == taken["relay_attempt"] == 2
    assert restarted["relay_token"] == taken["relay_token"]
    [succeeded] = relay_events(d, "succeeded")
    assert succeeded["relay_attempt"] == 2


@pytest.mark.parametrize("deploy", combos(["rabbitmq"]), indirect=True)
def test_a_gracefully_stopped_worker_reports_the_hand_over_and_a_scheduler_the_pick_up(
    deploy: Any,
) -> None:
    d: Deployment = deploy({"handover": {**one_slot_behind(), "sleep_first": 60}})
    first = d.worker("worker-a", threads=1, stop_ms=2000)
    scheduler = d.scheduler("scheduler")
    d.wait_for("attempt 1 to start", lambda: relay_events(d, "started"))
    assert d.stop(first) == 0, d.logs()
    d.worker("worker-b", threads=1)
    d.wait_for("the run to succeed", lambda: settled(d, "handover"))
    [handed] = relay_events(d, "handed_over")
    [picked] = relay_events(d, "picked_up")
    assert handed["process"] != scheduler.pid and picked["process"] == scheduler.pid
    assert (picked["relay_previous_owner"], picked["relay_previous_attempt"]) == (
        handed["relay_owner"], 1,
    )  # fmt: skip
    assert relay_events(d, "taken_over") == [] and relay_events(d, "retried") == []


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_failed_attempts_then_the_retry_are_reported_once_each(deploy: Any) -> None:
    d: Deployment = deploy({"flaky": {**one_slot_behind(), "fail": True, "max_attempts": 2}})
    d.worker("worker", threads=2)
    d.scheduler("scheduler")
    d.wait_for("the run to fail for good", lambda: settled(d, "flaky"))
    time.sleep(1)
    failed = relay_events(d, "failed")
    assert [(e["relay_attempt"], e["relay_max_attempts"], e["relay_final"]) for e in failed] == [
        (1, 2, False), (2, 2, True),
    ]  # fmt: skip
    [retried] = relay_events(d, "retried")
    assert retried["relay_attempt"] == 2
    assert relay_events(d, "exhausted") == []  # the last attempt failed: it did not die


@pytest.mark.redis
def test_a_store_restart_is_reported_once_per_scheduler(tmp_path: Path) -> None:
    queue = unique("relay_dq")
    with _redis_broker(queue) as broker_url, own_redis(tmp_path) as server:
        d = Deployment(
            tmp_path, "redis", broker_url, queue, server.url, {"tick": {"every": 1}}, "2,0.5,10"
        )
        try:
            d.worker("worker", threads=2)
            schedulers = {d.scheduler(f"scheduler{i}").pid for i in range(2)}
            d.wait_for("a run", lambda: relay_events(d, "succeeded"))
            d.wait_for("both schedulers", lambda: pids(d, "won") | pids(d, "lost") >= schedulers)
            server.kill()
            d.wait_for("the outage", lambda: pids(d, "store_unavailable") == schedulers)
            time.sleep(3)
            server.start()
            d.wait_for("the recovery", lambda: pids(d, "store_recovered") == schedulers)
            events = relay_events(d)
        finally:
            d.close()
    for kind in ("store_unavailable", "store_recovered"):
        assert sorted(e["process"] for e in events if e["relay_event"] == kind) == sorted(
            schedulers
        )
