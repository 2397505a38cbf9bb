"""Stored schedules run by real ``celery beat`` processes and a real worker on the test Redis.

A schedule added at runtime through :class:`relay.Control` is published by whichever beat wins
each slot, as its task with the stored arguments and publish options; edits, pauses and removals
are applied without a restart; a task the app does not allow is reported, never sent.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relay import Control
from relay.errors import ConfigurationError
from relay.runs import parse_run_id
from tests.celery_integration.cluster import APP, Cluster, cluster
from tests.support import services
from tests.support.backends import LEASE_BACKENDS, params
from tests.support.event_log import read_events
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis]

STORED = f"{APP}.stored"
RECORD = f"{APP}.record"
MARGIN = timedelta(seconds=2)
"""Slots this close after a change may still be decided by the definition before it: the change
reaches each beat at its next step, and a loaded machine delays steps."""


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'relay.db'}"


@pytest.fixture(params=params({name: LEASE_BACKENDS[name] for name in ("sqlite", "redis")}))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    factory, _ = LEASE_BACKENDS[request.param]
    with factory(tmp_path) as url:
        yield url


def stored_runs(c: Cluster) -> list[dict[str, Any]]:
    return c.events("stored")


def of_version(c: Cluster, v: int) -> list[dict[str, Any]]:
    """The stored runs whose kwargs are ``{"v": v}`` (each edit sets its own)."""
    return [e for e in stored_runs(c) if e["kwargs"] == {"v": v}]


def slot(event: dict[str, Any]) -> datetime:
    return parse_run_id(event["run"])[1]


def beats_allow(control: Control, task: str, beats: int) -> None:
    """Wait until ``beats`` live beats record ``task`` in their heartbeat."""
    wait_until(
        lambda: sum(task in tasks for tasks in control.allowed_tasks().values()) >= beats,
        f"{beats} beat(s) record {task} in their heartbeat",
        within=60,
    )


def test_a_stored_schedule_runs_once_per_slot_with_its_arguments_and_options(
    tmp_path: Path, store_url: str
) -> None:
    with cluster(tmp_path, services.require("redis"), store_url, {}) as c:
        c.set(schedulable='["stored"]')
        other_queue = f"{c.queue}_stored"
        for _ in range(2):
            c.beat()
        c.worker(pool="threads", concurrency=2, queues=(other_queue,))
        with Control(store_url) as control:
            beats_allow(control, STORED, 2)
            added = control.add_schedule(
                "report", STORED, every=1, args=[1, "a"], kwargs={"k": {"n": 2}},
                options={"queue": other_queue, "priority": 3, "headers": {"t_header": "x"}},
                catch_up=3,
            )  # fmt: skip
            c.wait_for("4 stored runs", lambda: len(stored_runs(c)) >= 4)
            control.remove_schedule("report", version=added.version)
        c.wait_quiet()
        found = stored_runs(c)
    counted = Counter(e["run"] for e in found)
    assert [run for run, n in counted.items() if n > 1] == []  # each slot once, both beats
    assert added.updated_at is not None
    assert all(slot(e) > added.updated_at for e in found)  # never fired at once, nor before
    for event in found:
        assert event["args"] == [1, "a"]
        assert event["kwargs"] == {"k": {"n": 2}}
        assert event["queue"] == other_queue  # published on the stored queue
        assert event["t_header"] == "x"
        assert event["run"].startswith("report@")
        assert event["version"] == added.version  # the run header carries it to the task


def test_edits_pause_and_remove_are_seen_without_a_restart(tmp_path: Path, sqlite_url: str) -> None:
    with cluster(tmp_path, services.require("redis"), sqlite_url, {}) as c:
        c.set(schedulable='["stored"]')
        beat = c.beat()
        c.worker(pool="threads", concurrency=2)
        with Control(sqlite_url) as control:
            beats_allow(control, STORED, 1)
            added = control.add_schedule("tick", STORED, every=1, kwargs={"v": 1})
            c.wait_for("2 runs", lambda: len(stored_runs(c)) >= 2)
            edited = control.update_schedule("tick", version=1, kwargs={"v": 2}, every=2)
            c.wait_for("2 runs of the edit", lambda: len(of_version(c, 2)) >= 2)
            paused = control.update_schedule("tick", version=2, enabled=False)
            c.wait_quiet(seconds=4)
            resumed = control.update_schedule("tick", version=3, enabled=True)
            c.wait_for(
                "a run after the resume",
                lambda: any(slot(e) > resumed.updated_at for e in stored_runs(c)),  # type: ignore[operator]
            )
            control.remove_schedule("tick", version=4)
            removed = control.schedule_history("tick")[-1].at
            c.wait_quiet(seconds=4)
        assert beat.poll() is None, c.logs()  # one beat throughout: no restart
        found = stored_runs(c)
    assert len(found) == len({e["run"] for e in found})
    assert added.updated_at and edited.updated_at and paused.updated_at and resumed.updated_at
    for event in found:
        at = slot(event)
        if event["kwargs"] == {"v": 1}:
            assert added.updated_at < at <= edited.updated_at + MARGIN
            assert event["version"] == added.version  # each run sees the version it ran
        else:
            assert event["kwargs"] == {"v": 2}
            assert event["version"] in (edited.version, resumed.version)
            assert at > edited.updated_at  # the edit never fired at once, nor caught up
            assert at.timestamp() % 2 == 0  # the edited schedule's own slots
            assert not paused.updated_at + MARGIN < at <= resumed.updated_at
            assert at <= removed + MARGIN


def test_a_task_beat_does_not_allow_is_reported_not_runnable_and_never_sent(
    tmp_path: Path, sqlite_url: str
) -> None:
    with cluster(tmp_path, services.require("redis"), sqlite_url, {}) as c:
        # Allowed through the setting this time, not relay_celery.schedulable().
        c.set(conf=json.dumps({"relay_schedulable_tasks": [STORED]}))
        c.beat()
        c.worker(pool="threads", concurrency=2)
        with Control(sqlite_url) as control:
            beats_allow(control, STORED, 1)
            with pytest.raises(ConfigurationError, match=rf"the live instances allow: {STORED}"):
                control.add_schedule("sneaky", RECORD, every=1)
            sneaky = control.add_schedule("sneaky", RECORD, every=1, force=True)
            control.add_schedule("fine", STORED, every=1)
            c.wait_for("3 runs of the allowed task", lambda: len(stored_runs(c)) >= 3)
            refused = wait_until(
                lambda: read_events(c.relay_events, "schedule_not_runnable"),
                "the refused schedule's event",
            )
            assert [e.get("relay_schedule") for e in refused] == ["sneaky"]
            assert f"does not allow task '{RECORD}'" in refused[0]["relay_reason"]
            assert "relay_celery.schedulable" in refused[0]["relay_reason"]
            assert refused[0]["relay_version"] == sneaky.version
            assert "not runnable" in {s.name: s.stored for s in control.jobs()}["sneaky"]
        assert c.events("start") == []  # the record task was never sent
        assert {e["run"].partition("@")[0] for e in stored_runs(c)} == {"fine"}


def test_a_stored_schedule_with_refused_options_is_not_runnable(
    tmp_path: Path, sqlite_url: str
) -> None:
    with cluster(tmp_path, services.require("redis"), sqlite_url, {}) as c:
        c.set(schedulable='["stored"]')
        c.beat()
        c.worker(pool="threads", concurrency=2)
        with Control(sqlite_url) as control:
            beats_allow(control, STORED, 1)
            # A callback would run another task: whoever writes the store may not choose one.
            control.add_schedule("linked", STORED, every=1, options={"link": {"task": RECORD}})
            refused = wait_until(
                lambda: read_events(c.relay_events, "schedule_not_runnable"),
                "the refused schedule's event",
            )
            assert "remove 'link'" in refused[0]["relay_reason"]
            control.add_schedule("fine", STORED, every=1)
            c.wait_for("2 runs of the allowed schedule", lambda: len(stored_runs(c)) >= 2)
        assert {e["run"].partition("@")[0] for e in stored_runs(c)} == {"fine"}


def test_a_beat_schedule_entry_with_a_stored_schedules_name_refuses_to_start(
    tmp_path: Path, sqlite_url: str
) -> None:
    with Control(sqlite_url) as control:
        control.add_schedule("nightly", STORED, every=3600, force=True)
    with cluster(tmp_path, services.require("redis"), sqlite_url, {"nightly": {"every": 5}}) as c:
        beat = c.beat()
        assert c.exit_code(beat) != 0
        logs = c.logs(tail=None)
    assert "code job(s) 'nightly'" in logs
    assert "stored schedule" in logs
