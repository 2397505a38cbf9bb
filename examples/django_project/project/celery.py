"""The project's Celery app: Relay schedules the beat entries; each run is published once.

``celery -A project worker`` and any number of ``celery -A project beat``.
"""

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab
from django.conf import settings

import relay_celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_scheduler = "relay_celery.RelayScheduler"  # Relay reads settings.RELAY
app.conf.beat_schedule = {
    "daily-digest": {
        "task": "reports.tasks.send_digest",
        "schedule": crontab(minute=0, hour=7),  # 07:00 Paris time, DST included
        "relay": {"max_attempts": 3, "catch_up": 6 * 3600, "stale_after": 12 * 3600},
    },
    "refresh-cache": {
        "task": "reports.tasks.refresh_cache",
        "schedule": timedelta(seconds=15),
        "relay": {"overlap": "skip"},
    },
}


app.conf.update(  # one Redis for both variants, this example's queue and keys apart
    broker_url=settings.BROKER_URL,
    timezone=settings.TIME_ZONE,
    task_default_queue=settings.NAMESPACE,
    broker_transport_options={"global_keyprefix": f"{settings.NAMESPACE}:"},
)
app.autodiscover_tasks()
relay_celery.install(app)
