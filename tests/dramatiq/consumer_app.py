"""The Dramatiq app of the consumer-mode tests: RabbitMQ broker, ``amqp://…?mode=consumer`` backend.

From the environment: RELAY_T_BROKER_URL, RELAY_T_BACKEND, RELAY_T_QUEUE (the actors' Dramatiq
queue), RELAY_T_OUT (JSON lines) and RELAY_T_JOBS (actor name -> periodic options plus
``sleep_first``, the seconds attempt 1 sleeps, and ``fail``). Every Relay event the middleware's
hooks receive is a ``relay`` line with its type and run id.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import relay_dramatiq
from relay.events import Event

broker = RabbitmqBroker(url=os.environ["RELAY_T_BROKER_URL"])
middleware = relay_dramatiq.RelayMiddleware(os.environ["RELAY_T_BACKEND"], tick=0.2)
broker.add_middleware(middleware)
dramatiq.set_broker(broker)


def emit(**values: Any) -> None:
    """Append one event line; O_APPEND keeps lines from several processes whole."""
    line = json.dumps({**values, "pid": os.getpid(), "at": time.time()}) + "\n"
    fd = os.open(os.environ["RELAY_T_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def hook(event: Event) -> None:
    """Report each event the middleware's hooks receive."""
    emit(event="relay", type=event.type, run=getattr(event, "run_id", None))


middleware.on(Event, hook)


def declare(name: str, options: dict[str, Any]) -> None:
    """One periodic actor that reports its run, sleeps on attempt 1, and fails or ends."""
    sleep_first = float(options.pop("sleep_first", 0))
    fail = bool(options.pop("fail", False))

    def body() -> None:
        run = relay_dramatiq.current_run()
        assert run is not None
        emit(event="start", run=run.id, token=run.token, attempt=run.attempt)
        time.sleep(sleep_first if run.attempt == 1 else 0)
        if fail:
            raise RuntimeError("failing on purpose")
        emit(event="end", run=run.id, token=run.token, attempt=run.attempt)

    body.__name__ = name
    actor = dramatiq.actor(body, actor_name=name, queue_name=os.environ["RELAY_T_QUEUE"])
    relay_dramatiq.periodic(**options)(actor)


for _name, _options in json.loads(os.environ["RELAY_T_JOBS"]).items():
    declare(_name, dict(_options))
