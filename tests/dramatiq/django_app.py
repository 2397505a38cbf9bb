"""A Django project's Dramatiq app for the process tests: ``dramatiq tests.dramatiq.django_app``
and ``python -m relay_dramatiq tests.dramatiq.django_app``.

``settings.RELAY`` configures ``relay_dramatiq.django.RelayMiddleware`` (as django_dramatiq
instantiates it), and ``RELAY["SCHEDULABLE_TASKS"]`` allows actor ``named``, declared without
``@relay_dramatiq.schedulable``, for stored schedules. It reads the environment variables of
``tests.dramatiq.app`` (a Redis broker only); ``named`` appends a ``stored`` event with its run,
the schedule version the run carries, and its arguments.
"""

from __future__ import annotations

import json
import os

import django
import dramatiq
from django.conf import settings
from dramatiq.brokers.redis import RedisBroker

import relay_dramatiq
from relay_dramatiq.django import RelayMiddleware
from tests.support.event_log import record_events

lease, heartbeat, queue_lease = (float(v) for v in os.environ["RELAY_T_LEASE"].split(","))
settings.configure(
    RELAY={
        "BACKEND": os.environ["RELAY_T_BACKEND"], "LEASE": lease, "HEARTBEAT": heartbeat,
        "QUEUE_LEASE": queue_lease, "TICK": 0.2, "SCHEDULABLE_TASKS": ["named"],
    }
)  # fmt: skip
django.setup()
record_events()
QUEUE = os.environ["RELAY_T_QUEUE"]

broker = RedisBroker(url=os.environ["RELAY_T_BROKER_URL"], namespace=QUEUE)
broker.add_middleware(RelayMiddleware())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def named(n: int, word: str = "") -> None:
    """Append what the actor got: its run (from the message's run header) and its arguments."""
    run = relay_dramatiq.current_run()
    assert run is not None, "a stored schedule's run must come with its run header"
    line = {"event": "stored", "run": run.id, "version": run.schedule_version, "args": [n, word]}
    with open(os.environ["RELAY_T_OUT"], "a") as out:  # one short line: appends stay whole
        out.write(json.dumps(line) + "\n")
