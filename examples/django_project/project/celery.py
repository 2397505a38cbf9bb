"""The project's Celery app: settings from Django (``CELERY_*``), Relay for beat and workers."""

import os

from celery import Celery

import relay_celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
relay_celery.install(app)
