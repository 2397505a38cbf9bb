"""The Celery app the integration tests start as real ``celery beat`` / ``celery worker`` processes.

Everything comes from environment variables, so each test isolates its broker queue and its
Relay store: RELAY_T_BROKER, RELAY_T_QUEUE, RELAY_T_BACKEND, RELAY_T_OUT (a JSON-lines file the
task appends to), RELAY_T_SCHEDULE (JSON: entry name -> {"every": s | "cron": "...",
"kwargs": {...}, "relay": {...}, "relay_jobs": {...}, "task": "record"}) and optional
RELAY_T_LEASE / _HEARTBEAT / _QUEUE_LEASE. For the set-up checks: RELAY_T_CONF (JSON, more
``app.conf`` keys) and RELAY_T_INSTALL: ``hooks`` (the default: ``beat_scheduler`` and
``relay_backend`` set, then ``install(app)``), ``none`` (no ``install``) or ``one-call``
(only ``install(app, backend=...)``). RELAY_T_EVENTS (optional) is a file every process logs
Relay's events to, as JSON lines. RELAY_T_SCHEDULABLE (JSON, optional): task names (of this
module) stored schedules may run, allowed with ``relay_celery.schedulable``.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab
from kombu import Queue

import relay_celery
from tests.support.event_log import record_events

BROKER = os.environ.get("RELAY_T_BROKER", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("RELAY_T_QUEUE", "relay_test")
INSTALL = os.environ.get("RELAY_T_INSTALL", "hooks")
BACKEND = os.environ.get("RELAY_T_BACKEND") or None

TRANSPORT: dict[str, Any] = {"global_keyprefix": f"{QUEUE}:"} if "redis" in BROKER else {}
if BROKER.startswith("sentinel://"):  # kombu's Redis Sentinel transport: the tests' service
    TRANSPORT = {"global_keyprefix": f"{QUEUE}:", "master_name": "relay"}

app = Celery("relay_test", broker=BROKER)
app.conf.update(
    task_default_queue=QUEUE,
    # A queue of its own per test, gone two minutes after its last consumer left (RabbitMQ).
    task_queues=[Queue(QUEUE, queue_arguments={"x-expires": 120_000})],
    broker_transport_options=TRANSPORT,
    beat_max_loop_interval=5,
    worker_enable_remote_control=False,
    beat_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    relay_lease=os.environ.get("RELAY_T_LEASE") and float(os.environ["RELAY_T_LEASE"]),
    relay_heartbeat=os.environ.get("RELAY_T_HEARTBEAT") and float(os.environ["RELAY_T_HEARTBEAT"]),
    relay_queue_lease=os.environ.get("RELAY_T_QUEUE_LEASE")
    and float(os.environ["RELAY_T_QUEUE_LEASE"]),
    **json.loads(os.environ.get("RELAY_T_CONF", "{}")),
)
if INSTALL == "hooks":
    app.conf.update(beat_scheduler="relay_celery.RelayScheduler", relay_backend=BACKEND)


def _entry(spec: dict[str, Any]) -> dict[str, Any]:
    schedule: Any = (
        timedelta(seconds=spec["every"]) if "every" in spec else crontab(*spec["cron"].split())
    )
    entry = {"task": f"tests.celery_integration.app.{spec.get('task', 'record')}"}
    entry["schedule"] = schedule
    entry["kwargs"] = spec.get("kwargs", {})
    if "relay" in spec:
        entry["relay"] = spec["relay"]
    return entry


record_events()
SCHEDULE = json.loads(os.environ.get("RELAY_T_SCHEDULE", "{}"))
app.conf.beat_schedule = {name: _entry(spec) for name, spec in SCHEDULE.items()}
RELAY_JOBS = {name: spec["relay_jobs"] for name, spec in SCHEDULE.items() if "relay_jobs" in spec}
if RELAY_JOBS:
    app.conf.relay_jobs = RELAY_JOBS
SCHEDULABLE = json.loads(os.environ.get("RELAY_T_SCHEDULABLE", "[]"))
if SCHEDULABLE:
    relay_celery.schedulable(*(f"{__name__}.{name}" for name in SCHEDULABLE), app=app)
if INSTALL == "hooks":
    relay_celery.install(app)
elif INSTALL == "one-call":
    relay_celery.install(app, backend=BACKEND)


def _write(event: dict[str, Any]) -> None:
    line = (json.dumps(event) + "\n").encode()
    fd = os.open(os.environ["RELAY_T_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task
def record(sleep: float = 0.0, sleep_first: float = 0.0, fail_first: bool = False) -> str:
    """Append a start and an end event for the current run; optionally sleep or fail once."""
    run = relay_celery.current_run()
    assert run is not None, "a task published by RelayScheduler must see its run"
    event = {"run": run.id, "attempt": run.attempt, "token": run.token, "pid": os.getpid()}
    _write({**event, "event": "start", "at": time.time()})
    if run.attempt == 1 and fail_first:
        raise RuntimeError("failing the first attempt on purpose")
    time.sleep(sleep + (sleep_first if run.attempt == 1 else 0.0))
    _write({**event, "event": "end", "at": time.time()})
    return run.id


@app.task
def plain() -> None:
    """Append a ``plain`` event, with the run if there is one (none under Celery's stock beat)."""
    run = relay_celery.current_run()
    _write({"event": "plain", "run": run and run.id, "at": time.time(), "pid": os.getpid()})


@app.task(bind=True)
def retrying(self: Any) -> str:
    """Ask Celery to retry the first attempt in 30 s; later attempts succeed."""
    run = relay_celery.current_run()
    assert run is not None
    event = {"run": run.id, "attempt": run.attempt, "token": run.token, "pid": os.getpid()}
    _write({**event, "event": "start", "at": time.time()})
    if run.attempt == 1:
        raise self.retry(countdown=30)
    _write({**event, "event": "end", "at": time.time()})
    return run.id


@app.task(bind=True)
def stored(self: Any, *args: Any, **kwargs: Any) -> None:
    """Append a ``stored`` event: the run, the task's own arguments, and how it was delivered."""
    run = relay_celery.current_run()
    assert run is not None, "a stored schedule's run must come with its run header"
    delivery = self.request.delivery_info or {}
    _write({
        "event": "stored", "run": run.id, "token": run.token, "args": list(args),
        "kwargs": kwargs, "version": run.schedule_version, "queue": delivery.get("routing_key"),
        "priority": delivery.get("priority"), "t_header": self.request.get("t_header"),
        "at": time.time(), "pid": os.getpid(),
    })  # fmt: skip


@app.task(autoretry_for=(RuntimeError,))
def autoretrying() -> None:
    """Declares Celery retries: a worker refuses to run it as a scheduled task on a lease store."""
