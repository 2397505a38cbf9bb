"""A plain Celery app whose periodic tasks any number of beats can schedule: each run happens once.

Start it (from this folder) with ``celery -A app worker --beat --loglevel INFO``; see README.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

import relay_celery

app = Celery("example", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    beat_schedule={
        "heartbeat-every-10s": {
            "task": "app.report",
            "schedule": timedelta(seconds=10),
            "args": ("heartbeat",),
        },
        "cleanup-every-minute": {
            "task": "app.report",
            "schedule": crontab(),  # every minute, in app.conf.timezone
            "args": ("cleanup",),
        },
    },
    # Relay's options per entry, kept out of beat_schedule so Celery's stock beat can still load it.
    relay_jobs={"cleanup-every-minute": {"overlap": "skip", "max_attempts": 3}},
)
# Both sides at once: the workers' run hooks, and RelayScheduler as beat_scheduler. SQLite serves
# one host (Relay logs a warning saying so); use PostgreSQL, Redis or NATS across hosts.
relay_celery.install(app, backend=os.environ.get("RELAY_BACKEND", "sqlite:///relay.db"))


@app.task
def report(what: str) -> str:
    """Print which run this is: the same run never prints twice, however many beats run."""
    run = relay_celery.current_run()
    assert run is not None
    message = f"{what}: run {run.id}, attempt {run.attempt}, token {run.token}"
    print(message)
    return message
