"""Stored schedules on RelayScheduler, in process: which tasks beat allows, and what it publishes.

No broker is needed (Celery's in-memory transport); the Relay store is a SQLite file. The real
beat and worker processes are in ``test_celery_stored.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

import relay_celery
from relay import Control
from relay.errors import ConfigurationError, UnsupportedOption
from relay.runs import HEADER, run_from_headers
from relay.settings import Settings, from_mapping
from relay_celery import RelayScheduler, install, schedulable
from relay_celery.beat import STORED_TICK
from relay_celery.stored import (
    PUBLISH_OPTIONS,
    RESERVED_HEADERS,
    allowed_tasks,
    publish_options,
)
from relay_celery.worker import _refuse_celery_retries, refuse_coroutine_tasks


def make_app(tmp_path: Path, **conf: Any) -> Celery:
    app = Celery("relay_unit", broker="memory://")
    app.conf.update(
        {
            "task_default_queue": f"q_{tmp_path.name}",
            "relay_backend": f"sqlite:///{tmp_path / 'relay.db'}",
            "beat_schedule": {},
            "beat_max_loop_interval": 5,
            **conf,
        }
    )
    install(app)
    return app


def test_schedulable_allows_tasks_per_app_as_a_decorator_or_by_name(tmp_path: Path) -> None:
    app, other = make_app(tmp_path), make_app(tmp_path)

    @relay_celery.schedulable
    @app.task(name="proj.report")
    def report() -> None:
        """A task."""

    assert not report.__evaluated__()  # a lazy task stays lazy until the app is finalized
    assert allowed_tasks(app, Settings()) == ("proj.report",)
    assert report.name == "proj.report"  # the decorator returns the task itself
    assert schedulable("proj.cleanup", "proj.sync", app=app) is None
    assert allowed_tasks(app, Settings()) == ("proj.cleanup", "proj.report", "proj.sync")
    assert allowed_tasks(other, Settings()) == ()
    assert allowed_tasks(other, Settings(schedulable_tasks=("a",))) == ("a",)
    with pytest.raises(ConfigurationError, match=r"needs the app it belongs to; pass app=app"):
        schedulable("proj.orphan")
    with pytest.raises(ConfigurationError, match=r"without '@'"):
        schedulable("a@b", app=other)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("proj.report", r"relay_schedulable_tasks .* must be a list of task names"),
        (["ok", ""], r"task name '' must be a non-empty string"),
        ([3], r"task name 3 must be"),
    ],
)
def test_a_bad_relay_schedulable_tasks_setting_fails_at_beat_start(
    tmp_path: Path, value: Any, message: str
) -> None:
    app = make_app(tmp_path, relay_schedulable_tasks=value)
    with pytest.raises(ConfigurationError, match=message):
        RelayScheduler(app)


def test_the_setting_is_read_from_django_and_app_conf_alike(tmp_path: Path) -> None:
    assert from_mapping({"schedulable_tasks": ["b", "a", "b"]}).schedulable_tasks == ("a", "b")
    code = textwrap.dedent(
        f"""
        import django
        from django.conf import settings
        settings.configure(RELAY={{"BACKEND": "sqlite:///{tmp_path}/dj.db",
                                   "SCHEDULABLE_TASKS": ["proj.a"]}})
        django.setup()
        from celery import Celery
        from relay_celery.config import load_settings
        from relay_celery.stored import allowed_tasks
        app = Celery("dj")
        print(allowed_tasks(app, load_settings(app)))
        app.config_from_object({{"CELERY_RELAY_SCHEDULABLE_TASKS": ["proj.b"]}}, namespace="CELERY")
        print(allowed_tasks(app, load_settings(app)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["('proj.a',)", "('proj.b',)"]  # app.conf overrides


def test_beat_records_its_allowed_tasks_and_reads_stored_schedules_only_then(
    tmp_path: Path,
) -> None:
    quiet = RelayScheduler(make_app(tmp_path))
    try:
        assert quiet.loop.schedules is not None and not quiet.loop.schedules.active
        assert quiet.loop.instance is not None and quiet.loop.instance.info.tasks == ()
        assert quiet.loop.interval == 5  # beat_max_loop_interval: nothing stored to watch
    finally:
        quiet.close()
    app = make_app(tmp_path, relay_schedulable_tasks=["proj.b"])
    schedulable("proj.a", app=app)
    scheduler = RelayScheduler(app)
    try:
        assert scheduler.loop.schedules is not None and scheduler.loop.schedules.active
        assert scheduler.loop.interval == STORED_TICK  # changes seen within a second
        assert scheduler.loop.instance is not None
        assert scheduler.loop.instance.info.tasks == ("proj.a", "proj.b")
        scheduler.tick()  # records the heartbeat
        with Control(app.conf.relay_backend) as control:
            assert list(control.allowed_tasks().values()) == [("proj.a", "proj.b")]
    finally:
        scheduler.close()


def test_allowed_tasks_need_a_lease_backend(tmp_path: Path) -> None:
    claims = f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim"
    RelayScheduler(make_app(tmp_path, relay_backend=claims)).close()  # none allowed: fine
    app = make_app(tmp_path, relay_backend=claims, relay_schedulable_tasks=["proj.a"])
    with pytest.raises(UnsupportedOption, match=r"'relay_schedulable_tasks' needs a lease"):
        RelayScheduler(app)


def test_an_allowed_task_that_is_async_or_retries_itself_is_refused(tmp_path: Path) -> None:
    app = make_app(tmp_path)

    @app.task(name="proj.coro")
    async def coro() -> None:
        """A coroutine Celery would never await."""

    @app.task(name="proj.retrying", autoretry_for=(RuntimeError,))
    def retrying() -> None:
        """Declares Celery retries."""

    refuse_coroutine_tasks(app, ["proj.retrying"])
    with pytest.raises(ConfigurationError, match=r"'proj.coro' \(allowed for stored sc.*async"):
        refuse_coroutine_tasks(app, ["proj.coro"])
    with pytest.raises(ConfigurationError, match=r"'proj.retrying' .* sets autoretry_for"):
        _refuse_celery_retries(app, ["proj.retrying"])


def test_publish_options_are_those_of_the_list_each_of_its_type() -> None:
    good = {
        "queue": "q", "exchange": "x", "routing_key": "r", "priority": 9, "expires": 30,
        "time_limit": 60, "soft_time_limit": 50.5, "headers": {"a": 1}, "ignore_result": True,
    }  # fmt: skip
    assert set(good) == PUBLISH_OPTIONS
    assert publish_options(good) == good
    for bad, message in [
        ({"link": {"task": "t"}}, r"remove 'link'"),
        ({"task_id": "x", "producer": 1}, r"remove 'producer', 'task_id'"),
        ({"queue": ""}, r"'queue'='' is refused: give a non-empty string"),
        ({"priority": 256}, r"give an integer from 0 to 255"),
        ({"priority": True}, r"give an integer from 0 to 255"),
        ({"expires": -1}, r"positive number of seconds"),
        ({"headers": {HEADER: {}}}, r"none of Celery's or Relay's"),
        ({"headers": {"task": "other.task"}}, r"none of Celery's or Relay's"),
        ({"headers": {"ok": 1, "reply_to": "q"}}, r"none of Celery's or Relay's"),
        ({"headers": ["a"]}, r"give a dict of your own message headers"),
    ]:
        with pytest.raises(ConfigurationError, match=message):
            publish_options(bad)


def test_stored_arguments_that_do_not_fit_the_task_are_not_runnable(tmp_path: Path) -> None:
    app = make_app(tmp_path)

    @schedulable
    @app.task(name="proj.fits")
    def fits(a: int, *, b: int = 0) -> None:
        """A task with a signature."""

    scheduler = RelayScheduler(app)
    try:
        with Control(app.conf.relay_backend) as control:
            control.add_schedule("bad", "proj.fits", every=60, kwargs={"c": 1}, force=True)
            control.add_schedule("good", "proj.fits", every=60, args=[1], force=True)
        scheduler.tick()
        feed = scheduler.loop.schedules
        assert feed is not None and set(feed.stored) == {"good"}
        assert "arguments do not fit task 'proj.fits'" in feed.not_runnable["bad"]
        assert "'c'" in feed.not_runnable["bad"]
    finally:
        scheduler.close()


def test_every_header_of_celerys_own_messages_is_reserved() -> None:
    # Celery lets a publish's headers override these: a stored one could change the task run.
    message = Celery("relay_unit", broker="memory://").amqp.as_task_v2("id", "name")
    assert set(message.headers) <= RESERVED_HEADERS
    assert {"reply_to", "delivery_info", "callbacks", "chain", "is_eager"} <= RESERVED_HEADERS


def test_a_stored_run_is_published_as_its_task_with_its_arguments_and_options(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)
    schedulable("proj.nightly", app=app)
    scheduler = RelayScheduler(app)
    queue = f"stored_{tmp_path.name}"
    try:
        with Control(app.conf.relay_backend) as control:
            control.add_schedule(
                "nightly", "proj.nightly", every=1, args=[1, "a"], kwargs={"k": 2},
                options={"queue": queue, "priority": 4, "headers": {"x": "y"}}, force=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        with app.connection_for_read() as connection:
            received = connection.SimpleQueue(queue)
            while True:
                scheduler.tick()
                try:
                    message = received.get(timeout=0.2)
                    break
                except received.Empty:
                    assert time.monotonic() < deadline, "beat published no stored run"
            message.ack()
            received.close()
    finally:
        scheduler.close()
    run = run_from_headers(message.headers[HEADER])
    assert run is not None and run.job == "nightly"
    assert run.schedule_version == 1  # the version it was won with, for the worker
    assert message.headers["task"] == "proj.nightly" and message.headers["x"] == "y"
    assert message.payload[0] == [1, "a"] and message.payload[1] == {"k": 2}
    assert message.properties["priority"] == 4
