"""Plausible Celery set-up mistakes, in process: each raises a RelayError naming the fix.

The same refusals are shown on real ``celery beat`` / ``celery worker`` processes in
``test_safety_processes.py``; here each case is one row of a table.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery

from relay.errors import ConfigurationError, RelayError
from relay_celery import RelayScheduler, install
from relay_celery.config import load_settings
from relay_celery.worker import RelayStep

STOCK = "celery.beat:PersistentScheduler"


def make_app(
    tmp_path: Path, *, hooks: bool = True, broker: str = "memory://", **conf: Any
) -> Celery:
    app = Celery("relay_safety", broker=broker)
    app.conf.update(
        {
            "task_default_queue": f"q_{tmp_path.name}",
            "relay_backend": f"sqlite:///{tmp_path / 'relay.db'}",
            "beat_schedule": {"tick": {"task": "t", "schedule": 60}},
            **conf,
        }
    )
    if hooks:
        install(app)
    return app


def start_beat(app: Celery) -> None:
    RelayScheduler(app).close()


def start_worker(app: Celery) -> None:
    RelayStep(SimpleNamespace(app=app))


class Namespaced:
    """Settings as Django exposes them to ``config_from_object(..., namespace="CELERY")``."""

    CELERY_BROKER_URL = "memory://"
    CELERY_RELAY_BAKEND = "redis://localhost:6379/0"


def namespaced_app(tmp_path: Path) -> Celery:
    app = Celery("relay_safety_dj")
    app.config_from_object(Namespaced, namespace="CELERY")
    app.conf.relay_backend = f"sqlite:///{tmp_path / 'relay.db'}"
    install(app)
    return app


CASES: list[tuple[str, Any, type[RelayError], list[str]]] = [
    (
        "misspelled relay_backend",
        lambda t: make_app(t, relay_backnd="redis://elsewhere:6379/0"),
        ConfigurationError,
        ["app.conf", "relay_backnd (did you mean relay_backend?)"],
    ),
    (
        "misspelled relay_heartbeat",
        lambda t: make_app(t, relay_hearbeat=5),
        ConfigurationError,
        ["relay_hearbeat (did you mean relay_heartbeat?)"],
    ),
    (
        "misspelled CELERY_RELAY_BACKEND (Django namespace)",
        namespaced_app,
        ConfigurationError,
        ["CELERY_RELAY_BAKEND (did you mean CELERY_RELAY_BACKEND?)"],
    ),
    (
        "no backend, RabbitMQ broker",
        lambda t: make_app(t, broker="amqp://guest@localhost//", relay_backend=None),
        ConfigurationError,
        ["Relay has no backend", "set app.conf.relay_backend", "amqp://"],
    ),
    (
        "misspelled relay_jobs entry",
        lambda t: make_app(t, relay_jobs={"tik": {"overlap": "skip"}}),
        ConfigurationError,
        ["relay_jobs names 'tik' (did you mean 'tick'?)", "not a beat_schedule entry"],
    ),
    (
        "misspelled relay_jobs option",
        lambda t: make_app(t, relay_jobs={"tick": {"overlaps": "skip"}}),
        ConfigurationError,
        ["entry 'tick'", "'overlaps' (did you mean 'overlap'?)"],
    ),
    (
        "relay_jobs not a mapping",
        lambda t: make_app(t, relay_jobs=["tick"]),
        ConfigurationError,
        ["relay_jobs must map beat_schedule entry names"],
    ),
    (
        "options in both places",
        lambda t: make_app(
            t,
            relay_jobs={"tick": {"overlap": "skip"}},
            beat_schedule={"tick": {"task": "t", "schedule": 60, "relay": {"max_attempts": 2}}},
        ),
        ConfigurationError,
        ["both in app.conf.relay_jobs and under its 'relay' key"],
    ),
    (
        "no install(app)",
        lambda t: make_app(t, hooks=False),
        ConfigurationError,
        ["no Relay worker hooks", "relay_celery.install(app)"],
    ),
]


@pytest.mark.parametrize(("case", "app", "error", "words"), CASES, ids=[c[0] for c in CASES])
def test_beat_refuses_at_start_naming_the_fix(
    tmp_path: Path, case: str, app: Any, error: type[RelayError], words: list[str]
) -> None:
    with pytest.raises(error) as caught:
        start_beat(app(tmp_path))
    for word in words:
        assert word in str(caught.value)


# relay_jobs and install() are beat's to check; settings are checked on both sides.
WORKER_CASES = [c for c in CASES if c[0].startswith(("misspelled relay_b", "misspelled relay_h"))]
WORKER_CASES += [c for c in CASES if c[0].startswith(("misspelled CELERY", "no backend"))]


@pytest.mark.parametrize(
    ("case", "app", "error", "words"), WORKER_CASES, ids=[c[0] for c in WORKER_CASES]
)
def test_the_worker_refuses_the_same_settings(
    tmp_path: Path, case: str, app: Any, error: type[RelayError], words: list[str]
) -> None:
    with pytest.raises(error) as caught:
        start_worker(app(tmp_path))
    for word in words:
        assert word in str(caught.value)


def test_a_redis_broker_is_the_store_when_no_backend_is_set(tmp_path: Path) -> None:
    app = make_app(tmp_path, broker="redis://:secret@broker:6379/2", relay_backend=None)
    assert load_settings(app).backend == "redis://:secret@broker:6379/2"


def test_install_options_are_the_lowest_layer(tmp_path: Path) -> None:
    app = Celery("relay_safety", broker="memory://")
    install(app, "redis://one:6379/0", lease=20)
    assert (load_settings(app).backend, load_settings(app).lease) == ("redis://one:6379/0", 20.0)
    install(app)  # again, without options: keeps the first call's
    app.conf.relay_lease = 40
    assert (load_settings(app).backend, load_settings(app).lease) == ("redis://one:6379/0", 40.0)
    with pytest.raises(ConfigurationError, match=r"relay_celery.install\(\)\['LEASE'\] must be"):
        install(app, lease="long")  # type: ignore[arg-type]


def test_install_makes_relay_the_beat_scheduler_unless_the_app_chose_one() -> None:
    chosen = Celery("a")
    install(chosen)
    assert chosen.conf.beat_scheduler == "relay_celery.RelayScheduler"
    configured = Celery("e")
    configured.conf.table()  # configuration already loaded when install() runs
    install(configured)
    assert configured.conf.beat_scheduler == "relay_celery.RelayScheduler"
    before = Celery("b")
    before.conf.beat_scheduler = STOCK
    install(before)
    assert before.conf.beat_scheduler == STOCK
    after = Celery("c")
    install(after)
    after.conf.beat_scheduler = STOCK  # rolling back is this one setting
    assert after.conf.beat_scheduler == STOCK

    class Settings:
        CELERY_BEAT_SCHEDULER = STOCK

    django_like = Celery("d")
    install(django_like)
    django_like.config_from_object(Settings, namespace="CELERY")
    assert django_like.conf.beat_scheduler == STOCK


def test_sqlite_logs_one_warning_per_process_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="relay")
    app = make_app(tmp_path)
    scheduler = RelayScheduler(app)
    scheduler.tick()
    scheduler.tick()
    scheduler.close()
    warnings = [r for r in caplog.records if "serves one host only" in r.getMessage()]
    assert len(warnings) == 1 and "PostgreSQL, Redis or NATS" in warnings[0].getMessage()


def test_relay_jobs_options_reach_the_job(tmp_path: Path) -> None:
    app = make_app(tmp_path, relay_jobs={"tick": {"overlap": "skip", "max_attempts": 5}})
    scheduler = RelayScheduler(app)
    try:
        job = scheduler.decider.jobs["tick"]
        assert job.overlap == "skip" and job.max_attempts == 5
    finally:
        scheduler.close()


RETRY_CASES = [
    ("lease store, scheduled", "relay.db", "tick", True),
    ("claim store, scheduled", "claims.db?strategy=claim", "tick", False),
    ("lease store, not scheduled", "relay.db", "other", False),
]


@pytest.mark.parametrize(
    ("case", "store", "entry_task", "refused"), RETRY_CASES, ids=[c[0] for c in RETRY_CASES]
)
def test_celery_retries_on_a_scheduled_task_are_refused_on_a_lease_store(
    tmp_path: Path, case: str, store: str, entry_task: str, refused: bool
) -> None:
    app = make_app(tmp_path, relay_backend=f"sqlite:///{tmp_path / store}")
    app.conf.beat_schedule = {"nightly": {"task": entry_task, "schedule": 60}}

    @app.task(name="tick", autoretry_for=(OSError,), shared=False)
    def tick() -> None: ...

    if not refused:
        start_worker(app)
        return
    with pytest.raises(ConfigurationError) as caught:
        start_worker(app)
    assert str(caught.value).startswith(
        "task 'tick' (beat_schedule entry 'nightly') sets autoretry_for, but Relay retries its "
        "runs itself: drop autoretry_for and set max_attempts in app.conf.relay_jobs['nightly']"
    )


@pytest.mark.parametrize(
    ("case", "store", "entry_task", "refused"), RETRY_CASES, ids=[c[0] for c in RETRY_CASES]
)
def test_beat_refuses_at_start_the_celery_retries_the_worker_refuses(
    tmp_path: Path, case: str, store: str, entry_task: str, refused: bool
) -> None:
    """One check on both sides: beat never publishes a run the worker would refuse to run."""
    app = make_app(tmp_path, relay_backend=f"sqlite:///{tmp_path / store}")
    app.conf.beat_schedule = {"nightly": {"task": entry_task, "schedule": 60}}

    @app.task(name="tick", autoretry_for=(OSError,), shared=False)
    def tick() -> None: ...

    if not refused:
        RelayScheduler(app).close()
        return
    with pytest.raises(ConfigurationError) as caught:
        RelayScheduler(app)
    assert str(caught.value).startswith(
        "task 'tick' (beat_schedule entry 'nightly') sets autoretry_for, but Relay retries its "
        "runs itself: drop autoretry_for and set max_attempts in app.conf.relay_jobs['nightly']"
    )


def test_django_relay_with_a_misspelled_key_is_refused(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        from django.conf import settings
        settings.configure(RELAY={{"BAKEND": "sqlite:///{tmp_path}/dj.db"}})
        from celery import Celery
        from relay.errors import ConfigurationError
        from relay_celery.config import load_settings
        try:
            load_settings(Celery("dj", broker="memory://"))
        except ConfigurationError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "settings.RELAY has unknown key(s) BAKEND (did you mean BACKEND?)" in out.stdout


def test_the_relay_key_still_works_and_is_logged_as_blocking_a_roll_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="relay")
    schedule = {"tick": {"task": "t", "schedule": 60, "relay": {"overlap": "skip"}}}
    scheduler = RelayScheduler(make_app(tmp_path, beat_schedule=schedule))
    try:
        assert scheduler.decider.jobs["tick"].overlap == "skip"
    finally:
        scheduler.close()
    (warning,) = [r.getMessage() for r in caplog.records if "'relay' key" in r.getMessage()]
    assert "entries tick carry" in warning and "move them to app.conf.relay_jobs" in warning
