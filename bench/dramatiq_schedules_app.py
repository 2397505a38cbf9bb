"""The Dramatiq app of ``bench_host_schedules``, run by ``relay-dramatiq`` three times.

Its Relay store is ``RELAY_B_BACKEND``; it allows the actor ``echo`` for stored schedules, and each
stored-schedule change a scheduler applies appends ``[version, time.time()]`` to ``RELAY_B_LOG``.
Nothing is ever due (the benchmark's schedule runs weekly), so a stub broker is enough.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.stub import StubBroker

import relay_dramatiq
from bench.applied_log import log_applied
from relay.events import ScheduleApplied

broker = StubBroker()
middleware = relay_dramatiq.RelayMiddleware(os.environ["RELAY_B_BACKEND"])
broker.add_middleware(middleware)
dramatiq.set_broker(broker)


@relay_dramatiq.schedulable
@dramatiq.actor
def echo(word: str = "") -> None:
    """Never runs here: the benchmark only edits the schedule."""


middleware.on(ScheduleApplied, log_applied)
