"""Relay's events from real ``celery beat`` and ``celery worker`` processes, each exactly once.

Every process logs the events as JSON lines (``RELAY_T_EVENTS``); the deciding events must come
from the beats, the running events from the workers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from relay.runs import parse_run_id
from tests.celery_integration.cluster import Cluster, cluster
from tests.celery_integration.test_celery_processes import (
    TOLERATE_STALLS,
    one_run_now,
    redis_broker,
)
from tests.support.event_log import count, read_events
from tests.support.redis_server import own_redis

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def relay_events(c: Cluster, kind: str | None = None) -> list[dict[str, Any]]:
    return read_events(c.relay_events, kind)


def pids(c: Cluster, kind: str) -> set[int]:
    return {e["process"] for e in relay_events(c, kind)}


def test_racing_beats_report_each_run_won_once_dispatched_once_and_run_once(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with cluster(
        tmp_path, redis_broker(), url, {"tick": {"every": 1, "relay": TOLERATE_STALLS}}
    ) as c:
        beats = [c.beat(), c.beat()]
        worker = c.worker(pool="threads", concurrency=2)
        c.wait_for(
            "both beats to decide",
            lambda: pids(c, "won") | pids(c, "lost") >= {b.pid for b in beats},
        )
        up = time.time()
        c.wait_for("runs after that", lambda: len(c.events("end")) >= 6 and time.time() > up + 5)
        for beat in beats:
            c.kill(beat)
        c.wait_quiet()
        events = relay_events(c)
    runs = [
        r for r in count(events, "succeeded") if up + 1 < parse_run_id(r)[1].timestamp() < up + 4
    ]
    assert len(runs) >= 2, events
    for kind, times in {"won": 1, "lost": 1, "dispatched": 1, "started": 1, "succeeded": 1}.items():
        counted = count(events, kind)
        assert [counted[r] for r in runs] == [times] * len(runs), (kind, events)
    beat_pids = {b.pid for b in beats}
    for kind in ("won", "lost", "dispatched"):
        assert pids(c, kind) <= beat_pids, kind
    for kind in ("started", "succeeded"):
        assert pids(c, kind) == {worker.pid}, kind


def test_a_killed_worker_is_taken_over_in_beat_and_its_late_message_fenced_off(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {**one_run_now(), "kwargs": {"sleep_first": 30}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.set(lease=3, heartbeat=1, queue_lease=10)
        beat = c.beat()
        first = c.worker(pool="solo")
        c.wait_for("the first attempt", lambda: relay_events(c, "started") != [])
        [started] = relay_events(c, "started")
        c.worker(pool="solo")
        c.kill(first)
        c.wait_for("the second attempt", lambda: relay_events(c, "succeeded") != [], timeout=60)
        c.publish(
            {
                "id": started["relay_run_id"],
                "token": started["relay_token"],
                "attempt": 1,
                "owner": "x",
            }
        )
        c.wait_for("the late duplicate", lambda: relay_events(c, "fenced_off") != [])
        time.sleep(2)  # more sweeps and deliveries: nothing else may be reported
        events = relay_events(c)
    [taken] = [e for e in events if e["relay_event"] == "taken_over"]
    assert taken["process"] == beat.pid
    assert (taken["relay_previous_owner"], taken["relay_previous_attempt"]) == (
        started["relay_owner"],
        1,
    )
    assert (taken["relay_attempt"], taken["relay_max_attempts"]) == (2, 3)
    [fenced] = [e for e in events if e["relay_event"] == "fenced_off"]
    assert (fenced["relay_operation"], fenced["relay_token"]) == ("start", started["relay_token"])
    [succeeded] = [e for e in events if e["relay_event"] == "succeeded"]
    assert succeeded["relay_attempt"] == 2 and succeeded["process"] != first.pid


def test_a_failed_attempt_is_reported_in_the_worker_and_its_retry_in_beat(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"flaky": {**one_run_now(max_attempts=3), "kwargs": {"fail_first": True}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.set(lease=3, heartbeat=1)
        beat = c.beat()
        worker = c.worker()
        c.wait_for("the retry to succeed", lambda: relay_events(c, "succeeded") != [])
        c.wait_quiet()
        events = [e for e in relay_events(c) if e["relay_event"] != "lost"]
    kinds = [(e["relay_event"], e["process"]) for e in events]
    assert kinds == [
        ("won", beat.pid), ("dispatched", beat.pid), ("started", worker.pid),
        ("failed", worker.pid), ("retried", beat.pid), ("dispatched", beat.pid),
        ("started", worker.pid), ("succeeded", worker.pid),
    ]  # fmt: skip
    failed = events[3]
    assert (failed["relay_attempt"], failed["relay_max_attempts"], failed["relay_final"]) == (
        1,
        3,
        False,
    )
    assert "failing the first attempt on purpose" in failed["relay_error"]
    assert failed["levelname"] == "ERROR" and "exc_info" in failed  # with the traceback
    assert (events[4]["relay_attempt"], events[4]["relay_max_attempts"]) == (2, 3)


def test_overlapping_runs_are_reported_skipped_by_one_beat_each(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {"every": 1, "kwargs": {"sleep": 2.5}, "relay": {"overlap": "skip"}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.beat()
        c.beat()
        c.worker(pool="threads", concurrency=2)
        c.wait_for("three skips", lambda: len(relay_events(c, "skipped")) >= 3, timeout=60)
        events = relay_events(c)
    skipped = count(events, "skipped")
    assert set(skipped.values()) == {1}
    assert {e["relay_reason"] for e in events if e["relay_event"] == "skipped"} == {"overlap"}


def test_a_store_restart_is_reported_once_per_beat(tmp_path: Path) -> None:
    with own_redis(tmp_path) as server:
        schedule = {"tick": {"every": 1}}
        with cluster(tmp_path, redis_broker(), server.url, schedule) as c:
            c.set(lease=3, heartbeat=0.5, queue_lease=5)
            beats = [c.beat(), c.beat()]
            c.worker(pool="threads", concurrency=2)
            c.wait_for("a run", lambda: relay_events(c, "succeeded") != [])
            beat_pids = {b.pid for b in beats}
            c.wait_for("both beats", lambda: pids(c, "won") | pids(c, "lost") >= beat_pids)
            server.kill()
            c.wait_for("the outage", lambda: pids(c, "store_unavailable") == {b.pid for b in beats})
            time.sleep(3)
            server.start()
            c.wait_for("the recovery", lambda: pids(c, "store_recovered") == {b.pid for b in beats})
            events = relay_events(c)
    for kind in ("store_unavailable", "store_recovered"):
        assert sorted(e["process"] for e in events if e["relay_event"] == kind) == sorted(
            b.pid for b in beats
        )
