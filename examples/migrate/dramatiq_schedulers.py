"""After a move from periodiq or dramatiq-crontab: ``@relay_dramatiq.periodic`` on the same actors.

Before (periodiq): ``@dramatiq.actor(periodic=cron("0 * * * *"))`` and one ``periodiq app``
process. Before (dramatiq-crontab): ``@cron("*/5 * * * *")`` or ``@interval(seconds=30)`` above
``@dramatiq.actor`` and ``manage.py crontab``, one active at a time behind a Redis lock. After: any
number of ``relay-dramatiq dramatiq_schedulers`` processes, each run enqueued once, and workers
that renew the run's lease while the actor works. See docs/migrate/dramatiq-schedulers.md.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

import relay_dramatiq

REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

broker = RedisBroker(url=REDIS)
broker.add_middleware(
    relay_dramatiq.RelayMiddleware(os.environ.get("RELAY_BACKEND", f"{REDIS}?prefix=relay:"))
)
dramatiq.set_broker(broker)


# periodiq: @dramatiq.actor(periodic=cron("0 * * * *")), PeriodiqMiddleware(skip_delay=30)
@relay_dramatiq.periodic(cron="0 * * * *", stale_after=30)
@dramatiq.actor
def hourly() -> None:
    """Once an hour, from whichever scheduler wins the run."""


@relay_dramatiq.periodic(cron="*/5 * * * *", tz="Europe/Paris")  # dramatiq-crontab: @cron(...)
@dramatiq.actor
def every_five_minutes() -> None:
    """Every five minutes, Paris time."""


@relay_dramatiq.periodic(every=30, overlap="skip")  # dramatiq-crontab: @interval(seconds=30)
@dramatiq.actor
def every_thirty_seconds() -> None:
    """Every 30 s, slots aligned on the Unix epoch; skipped while the previous one still runs."""
