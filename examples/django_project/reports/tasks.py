"""Periodic tasks; Relay makes sure each run happens once, however many beats run."""

import time

from celery import shared_task

import relay_celery


@shared_task
def send_digest() -> str:
    """Send the daily digest (once per day, even with three beats and a beat restart)."""
    run = relay_celery.current_run()
    assert run is not None
    return f"digest for {run.scheduled_for:%Y-%m-%d} (run {run.id}, token {run.token})"


@shared_task
def refresh_cache() -> str:
    """Refresh a cache; slow on purpose, and skipped while the previous run is still going."""
    run = relay_celery.current_run()
    assert run is not None
    time.sleep(1)
    print(f"cache refreshed by run {run.id}")
    return run.id
