"""The Dramatiq app the process tests run: ``dramatiq tests.dramatiq.app`` and
``python -m relay_dramatiq tests.dramatiq.app``.

Everything comes from environment variables, so each test gets its own broker namespace, queue
and store: ``RELAY_T_BROKER`` (``redis`` or ``rabbitmq``), ``RELAY_T_BROKER_URL``, ``RELAY_T_QUEUE``
(the queue, and the Redis namespace), ``RELAY_T_BACKEND`` (a Relay backend URL), ``RELAY_T_LEASE``
(``lease,heartbeat,queue_lease`` in seconds), ``RELAY_T_OUT`` (a file each actor call appends JSON
lines to) and ``RELAY_T_JOBS`` (JSON: actor name -> periodic options plus ``sleep`` and
``sleep_first``, the seconds attempt 1 sleeps, ``stuck``, ``fail`` and ``async``: an ``async def``
actor, run by Dramatiq's AsyncIO middleware, that also reports its cancellation). ``RELAY_T_EVENTS``
(optional) is a file every process logs Relay's events to, as JSON lines. With
``RELAY_T_STORED=1`` it also declares ``echo`` (schedulable) and ``other`` (not), actors for
stored schedules that report their run and arguments.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import AsyncIO

import relay_dramatiq
from tests.support.event_log import record_events

record_events()
QUEUE = os.environ["RELAY_T_QUEUE"]
OUT = os.environ["RELAY_T_OUT"]

if os.environ["RELAY_T_BROKER"] == "redis":
    broker: dramatiq.Broker = RedisBroker(url=os.environ["RELAY_T_BROKER_URL"], namespace=QUEUE)
else:
    broker = RabbitmqBroker(url=os.environ["RELAY_T_BROKER_URL"])
lease, heartbeat, queue_lease = (float(v) for v in os.environ["RELAY_T_LEASE"].split(","))
JOBS: dict[str, dict[str, Any]] = json.loads(os.environ["RELAY_T_JOBS"])
if any(options.get("async") for options in JOBS.values()):
    broker.add_middleware(AsyncIO())
broker.add_middleware(
    relay_dramatiq.RelayMiddleware(
        os.environ["RELAY_T_BACKEND"],
        lease=lease,
        heartbeat=heartbeat,
        queue_lease=queue_lease,
        tick=0.2,
    )
)
dramatiq.set_broker(broker)


def emit(**values: Any) -> None:
    """Append one event line; O_APPEND keeps lines from several processes whole."""
    line = json.dumps({**values, "pid": os.getpid(), "t": time.time()}) + "\n"
    fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def pause(seconds: float, stuck: bool) -> None:
    """Sleep; ``stuck`` sleeps in one C call, which Dramatiq's Shutdown cannot interrupt."""
    if stuck:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


def declare(name: str, options: dict[str, Any]) -> None:
    """Declare one periodic actor that reports its run, sleeps, and reports again."""
    sleep = float(options.pop("sleep", 0))
    sleep_first = float(options.pop("sleep_first", sleep))
    fail = bool(options.pop("fail", False))
    stuck = bool(options.pop("stuck", False))
    if options.pop("async", False):
        declare_async(name, sleep, sleep_first, options)
        return

    def body() -> None:
        run = relay_dramatiq.current_run()
        assert run is not None
        emit(event="start", run=run.id, token=run.token, attempt=run.attempt)
        pause(sleep_first if run.attempt == 1 else sleep, stuck)
        if fail:
            emit(event="fail", run=run.id, token=run.token, attempt=run.attempt)
            raise RuntimeError("failing on purpose")
        emit(event="done", run=run.id, token=run.token, attempt=run.attempt)

    body.__name__ = name
    actor = dramatiq.actor(queue_name=QUEUE, actor_name=name, notify_shutdown=True)(body)
    relay_dramatiq.periodic(**options)(actor)


def declare_async(name: str, sleep: float, sleep_first: float, options: dict[str, Any]) -> None:
    """Declare one ``async def`` periodic actor that reports its run, awaits a sleep, and
    reports again, or reports that it was cancelled."""

    async def body() -> None:
        run = relay_dramatiq.current_run()
        assert run is not None
        emit(event="start", run=run.id, token=run.token, attempt=run.attempt)
        try:
            await asyncio.sleep(sleep_first if run.attempt == 1 else sleep)
        except asyncio.CancelledError:
            emit(event="cancelled", run=run.id, token=run.token, attempt=run.attempt)
            raise
        emit(event="done", run=run.id, token=run.token, attempt=run.attempt)

    body.__name__ = name
    actor = dramatiq.actor(queue_name=QUEUE, actor_name=name)(body)
    relay_dramatiq.periodic(**options)(actor)


for _name, _options in JOBS.items():
    declare(_name, _options)


def declare_stored() -> None:
    """Declare ``echo``, which stored schedules may run, and ``other``, which they may not
    (unless a scheduler allows it with ``--schedulable other``)."""

    def report(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        run = relay_dramatiq.current_run()
        assert run is not None
        emit(
            event="stored", actor=name, run=run.id, token=run.token, args=args, kwargs=kwargs,
            version=run.schedule_version,
        )  # fmt: skip

    def echo(n: int, word: str = "") -> None:
        report("echo", (n,), {"word": word})

    def other(n: int) -> None:
        report("other", (n,), {})

    relay_dramatiq.schedulable(dramatiq.actor(queue_name=QUEUE, actor_name="echo")(echo))
    dramatiq.actor(queue_name=QUEUE, actor_name="other")(other)


if os.environ.get("RELAY_T_STORED"):
    declare_stored()
