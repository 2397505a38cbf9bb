"""The Dramatiq broker of the project, set up for Django: import it before any actor module.

``dramatiq project.dramatiq reports.actors`` (workers) and
``python manage.py relay_dramatiq project.dramatiq reports.actors`` (schedulers) both import it.
Relay's middleware is built from ``settings.RELAY``.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup()

import dramatiq  # noqa: E402 (Django is set up first)
from django.conf import settings  # noqa: E402
from dramatiq.brokers.redis import RedisBroker  # noqa: E402

from relay_dramatiq.django import RelayMiddleware  # noqa: E402

broker = RedisBroker(url=settings.BROKER_URL, namespace=settings.NAMESPACE)
broker.add_middleware(RelayMiddleware())
dramatiq.set_broker(broker)
