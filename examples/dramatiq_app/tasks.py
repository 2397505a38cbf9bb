"""A Dramatiq app with two periodic actors, decided by Relay.

The broker is Redis (``REDIS_URL``, default ``redis://127.0.0.1:6379/0``); Relay's store is a
SQLite file next to this module (``RELAY_BACKEND`` to use another, e.g. ``postgresql://…``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import dramatiq
from dramatiq.brokers.redis import RedisBroker

import relay_dramatiq

HERE = Path(__file__).resolve().parent
log = logging.getLogger("example")

broker = RedisBroker(
    url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    namespace=os.environ.get("EXAMPLE_NAMESPACE", "relay_example"),
)
broker.add_middleware(
    relay_dramatiq.RelayMiddleware(
        os.environ.get("RELAY_BACKEND", f"sqlite:///{HERE / 'relay-example.db'}")
    )
)
dramatiq.set_broker(broker)


@relay_dramatiq.periodic(every=5)
@dramatiq.actor
def report() -> None:
    """Every 5 seconds, once, whichever scheduler wins the run and whichever worker gets it."""
    run = relay_dramatiq.current_run()
    assert run is not None
    log.warning("ran %s (attempt %d, token %d)", run.id, run.attempt, run.token)


@relay_dramatiq.periodic(cron="* * * * *", overlap="skip", max_attempts=3)
@dramatiq.actor
def cleanup() -> None:
    """Every minute; skipped while the previous one is queued or running; 3 attempts."""
    run = relay_dramatiq.current_run()
    assert run is not None
    log.warning("cleaned up for %s (attempt %d)", run.id, run.attempt)
