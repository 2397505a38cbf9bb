"""RelayScheduler's set-up, in process: schedules, options and settings are checked at beat start.

No broker is needed (Celery's in-memory transport); the Relay store is a SQLite file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery
from celery.schedules import BaseSchedule, crontab
from kombu.asynchronous import Hub

from relay.backends.sqlite import SQLiteLeaseBackend
from relay.errors import ConfigurationError, UnsupportedOption
from relay.runs import HEADER, run_from_headers
from relay_celery import RelayScheduler, install
from relay_celery.schedules import crontab_expression
from relay_celery.worker import POOL_CHECK, RelayStep

UTC = timezone.utc


def make_app(tmp_path: Path, schedule: dict[str, Any], **conf: Any) -> Celery:
    app = Celery("relay_unit", broker="memory://")
    app.conf.update(
        {
            # The in-memory transport is shared by the whole process: a queue per test.
            "task_default_queue": f"q_{tmp_path.name}",
            "relay_backend": f"sqlite:///{tmp_path / 'relay.db'}",
            "beat_schedule": schedule,
            "beat_max_loop_interval": 5,
            **conf,
        }
    )
    install(app)  # beat refuses an app without Relay's worker hooks
    return app


def entry(schedule: Any, **extra: Any) -> dict[str, Any]:
    return {"task": "t", "schedule": schedule, **extra}


def test_a_crontab_becomes_the_same_cron_expression() -> None:
    expression = crontab_expression("e", crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"))
    assert expression == "0,15,30,45 9,10,11,12,13,14,15,16,17 * * 1,2,3,4,5"
    assert crontab_expression("e", crontab()) == "* * * * *"
    assert crontab_expression("e", crontab(0, 4, day_of_month="1")) == "0 4 1 * *"


def test_a_crontab_restricting_both_days_is_refused_naming_the_entry() -> None:
    with pytest.raises(ConfigurationError, match=r"'odd days'.*day_of_month and day_of_week"):
        crontab_expression("odd days", crontab(day_of_week="mon", day_of_month="1-7"))


def test_crontab_slots_follow_the_app_timezone(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"nine": entry(crontab(minute=0, hour=9))}, timezone="Europe/Paris")
    scheduler = RelayScheduler(app)
    try:
        schedule = scheduler.decider.jobs["nine"].schedule
        summer = schedule.latest_slot(datetime(2026, 6, 1, 12, tzinfo=UTC))
        winter = schedule.latest_slot(datetime(2026, 12, 1, 12, tzinfo=UTC))
        assert summer == datetime(2026, 6, 1, 7, tzinfo=UTC)
        assert winter == datetime(2026, 12, 1, 8, tzinfo=UTC)
        assert "Europe/Paris" in schedule.describe()
    finally:
        scheduler.close()


def test_an_interval_is_an_epoch_anchored_every_schedule(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"a": entry(timedelta(seconds=90)), "b": entry(30)})
    scheduler = RelayScheduler(app)
    try:
        descriptions = {n: j.schedule.describe() for n, j in scheduler.decider.jobs.items()}
        assert descriptions == {"a": "every 90s", "b": "every 30s"}
    finally:
        scheduler.close()


class Custom(BaseSchedule):
    """A schedule Relay cannot derive slots from."""


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"odd": entry(Custom())}, r"entry 'odd' uses a Custom schedule"),
        ({"odd": entry(5, relay={"overlaps": "skip"})}, r"entry 'odd': unknown relay option"),
        ({"odd": entry(5, relay="skip")}, r"entry 'odd': 'relay' must be a dict"),
        ({"odd": entry(5, relay={"overlap": "never"})}, r"entry 'odd': overlap='never'"),
        ({"odd": entry(5, relay={"max_attempts": 0})}, r"entry 'odd': max_attempts=0"),
        ({"a@b": entry(5)}, r"without '@'"),
    ],
)
def test_bad_entries_fail_at_beat_start_naming_the_entry(
    tmp_path: Path, schedule: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RelayScheduler(make_app(tmp_path, schedule))


def test_lease_options_are_refused_on_a_claim_backend(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"e": entry(5, relay={"overlap": "skip"})})
    app.conf.relay_backend = f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim"
    with pytest.raises(UnsupportedOption, match=r"entry 'e': option 'overlap' needs a lease"):
        RelayScheduler(app)
    app.conf.beat_schedule = {"e": entry(5, relay={"stale_after": 30})}
    RelayScheduler(app).close()  # stale_after works on claims
    app.conf.relay_queue_lease = 600
    with pytest.raises(UnsupportedOption, match=r"'queue_lease'"):
        RelayScheduler(app)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        (
            {"relay_lease": "long"},
            r"relay_lease \(CELERY_RELAY_LEASE in Django\) must be a",
        ),
        ({"relay_lease": 10, "relay_heartbeat": 20}, r"heartbeat \(20s\) must be shorter"),
        ({"relay_backend": "relay.db"}, r"app.conf.relay_backend .* must be a backend URL"),
        ({"relay_backend": "mongodb://x"}, r"unknown backend URL scheme"),
        ({"relay_queue_lease": 5}, r"relay_queue_lease \(5s\) is shorter than relay_lease"),
    ],
)
def test_bad_settings_fail_at_beat_start_naming_the_setting(
    tmp_path: Path, conf: dict[str, Any], message: str
) -> None:
    app = make_app(tmp_path, {"e": entry(5)})
    app.conf.update(conf)
    with pytest.raises(ConfigurationError, match=message):
        RelayScheduler(app)


def test_a_lazy_scheduler_opens_nothing(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"e": entry(5)}, relay_backend="sqlite:///missing/dir/relay.db")
    scheduler = RelayScheduler(app, lazy=True)
    assert scheduler.info == "relay"
    scheduler.close()


class CountingBackend:
    """Counts every call a scheduler makes to the store."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if callable(value):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return value(*args, **kwargs)

            return counted
        return value


def test_ticks_ask_the_store_nothing_until_a_slot_is_due(tmp_path: Path) -> None:
    schedule = {f"job{i}": entry(10**8) for i in range(200)}  # no slot for years
    scheduler = RelayScheduler(make_app(tmp_path, schedule, relay_heartbeat=1))
    try:
        counting = CountingBackend(scheduler.decider.backend)
        scheduler.decider.backend = counting
        assert scheduler.tick() == 0.0  # the first tick decides (and learns each job's history)
        assert counting.calls.count("last_slots") == 1  # all 200 jobs' history in one call
        counting.calls.clear()
        for _ in range(100):
            delay = scheduler.tick()
            assert 0 < delay <= 5
        assert counting.calls == []
    finally:
        scheduler.close()


def test_a_won_run_is_published_with_its_run_header(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"e": entry(3600, relay={"catch_up": 3600}, args=(1, 2))})
    scheduler = RelayScheduler(app)
    try:
        scheduler.tick()
        with app.connection_for_read() as connection:
            message = connection.SimpleQueue(app.conf.task_default_queue).get(timeout=5)
            message.ack()
    finally:
        scheduler.close()
    run = run_from_headers(message.headers[HEADER])
    assert run is not None and run.job == "e"
    store = SQLiteLeaseBackend(tmp_path / "relay.db")
    try:
        assert [(r.id, r.token) for r in store.runs("e")] == [(run.id, run.token)]
    finally:
        store.close()
    assert message.headers["task"] == "t" and message.headers["celery_beat_task"] is True
    assert message.payload[0] == [1, 2]


def test_install_adds_one_worker_step() -> None:
    app = Celery("relay_unit", broker="memory://")
    install(app)
    install(app)
    assert [s for s in app.steps["worker"] if s is RelayStep] == [RelayStep]


def test_a_prefork_worker_checks_its_pool_for_dead_children_every_pool_check(
    tmp_path: Path,
) -> None:
    # Celery's own check runs every 5 s: a run re-dispatched to a worker whose child was killed
    # waited for it (bench/failover_celery.py measured up to 3.6 s over the lease).
    step = RelayStep(SimpleNamespace(app=make_app(tmp_path, {})))
    checks: list[float] = []
    hub = Hub()
    prefork = SimpleNamespace(maintain_pool=lambda: checks.append(time.monotonic()))
    step.register_with_event_loop(SimpleNamespace(pool=prefork), hub)
    for expected in (1, 2, 3):
        time.sleep(POOL_CHECK * 1.1)
        hub.fire_timers(propagate=(Exception,))
        assert len(checks) == expected
    assert POOL_CHECK <= 0.5

    threads = Hub()  # a threads or solo pool has no children to check
    step.register_with_event_loop(SimpleNamespace(pool=SimpleNamespace()), threads)
    assert threads.timer.queue == []


def test_django_relay_settings_are_read(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import django
        from django.conf import settings
        settings.configure(RELAY={{"BACKEND": "sqlite:///{tmp_path}/dj.db", "LEASE": 12}})
        django.setup()
        from celery import Celery
        from relay_celery.config import load_settings
        app = Celery("dj")
        app.conf.relay_heartbeat = 3
        print(load_settings(app))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"backend='sqlite:///{tmp_path}/dj.db', lease=12.0, heartbeat=3.0" in out.stdout


def test_beat_sleeps_until_the_next_slot_of_any_entry(tmp_path: Path) -> None:
    scheduler = RelayScheduler(make_app(tmp_path, {"hourly": entry(3600), "often": entry(7)}))
    try:
        scheduler.tick()
        delay = scheduler.tick()
        until_next = 7 - time.time() % 7
        assert 0 < delay <= until_next + 0.01
    finally:
        scheduler.close()
