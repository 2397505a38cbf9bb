"""The same periodic work as ``tasks.py``, as Dramatiq actors: Relay enqueues each run once."""

import logging

import dramatiq
import project.dramatiq  # noqa: F401 (the broker, with Relay's middleware)

import relay_dramatiq

log = logging.getLogger("reports")


@relay_dramatiq.periodic(every=5)
@dramatiq.actor
def refresh_cache() -> None:
    """Every 5 seconds, once, whichever scheduler wins the run and whichever worker gets it."""
    run = relay_dramatiq.current_run()
    assert run is not None
    log.warning("cache refreshed by run %s (token %d)", run.id, run.token)


@relay_dramatiq.periodic(cron="0 7 * * *", tz="Europe/Paris", max_attempts=3, catch_up=6 * 3600)
@dramatiq.actor
def send_digest() -> None:
    """At 07:00 Paris time, once a day."""
    run = relay_dramatiq.current_run()
    assert run is not None
    log.warning("digest for %s (run %s)", run.scheduled_for.date(), run.id)
