"""The Celery app of the consumer-mode tests: RabbitMQ broker, ``amqp://…?mode=consumer`` backend.

From the environment: RELAY_T_BROKER, RELAY_T_BACKEND (with its own queue prefix), RELAY_T_OUT
(JSON lines the task appends), RELAY_T_FENCE (a SQLite file for fenced writes), RELAY_T_SCHEDULE
(entry name -> {"every": s, "kwargs": {...}, "relay": {...}}) and RELAY_T_HEARTBEAT_S (the AMQP
heartbeat of every process, seconds).
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

from celery import Celery

import relay_celery
from relay.fencing import SQLFence

app = Celery("relay_consumer_test", broker=os.environ.get("RELAY_T_BROKER", "amqp://"))
app.conf.update(
    beat_scheduler="relay_celery.RelayScheduler",
    beat_max_loop_interval=1,
    worker_enable_remote_control=False,
    beat_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    broker_heartbeat=float(os.environ.get("RELAY_T_HEARTBEAT_S", "10")),
    worker_cancel_long_running_tasks_on_connection_loss=False,
    task_default_queue=os.environ.get("RELAY_T_QUEUE", "relay_consumer_test"),
    relay_backend=os.environ.get("RELAY_T_BACKEND"),
)
SCHEDULE = json.loads(os.environ.get("RELAY_T_SCHEDULE", "{}"))
app.conf.beat_schedule = {
    name: {
        "task": "tests.celery_integration.consumer_app.record",
        "schedule": timedelta(seconds=spec["every"]),
        "kwargs": spec.get("kwargs", {}),
        **({"relay": spec["relay"]} if "relay" in spec else {}),
    }
    for name, spec in SCHEDULE.items()
}
relay_celery.install(app)


def _write(event: dict[str, Any]) -> None:
    line = (json.dumps(event) + "\n").encode()
    fd = os.open(os.environ["RELAY_T_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task
def record(sleep: float = 0.0, sleep_first: float = 0.0, fail: bool = False) -> str:
    """Write start, sleep, make a fenced write keyed by the run, write end (with whether the
    fence applied the write); ``fail`` raises instead."""
    run = relay_celery.current_run()
    assert run is not None, "a task published by RelayScheduler must see its run"
    event = {"run": run.id, "attempt": run.attempt, "token": run.token, "pid": os.getpid()}
    _write({**event, "event": "start", "at": time.time()})
    time.sleep(sleep + (sleep_first if run.attempt == 1 else 0.0))
    if fail:
        raise RuntimeError("this task always fails")
    fence = SQLFence.sqlite(os.environ["RELAY_T_FENCE"])
    try:
        applied = fence.write(run.id, run.token, str(os.getpid()))
    finally:
        fence.connection.close()  # type: ignore[attr-defined]
    _write({**event, "event": "end", "fenced": applied, "at": time.time()})
    return run.id
