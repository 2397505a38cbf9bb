"""The middleware configured from Django settings, for django_dramatiq's ``MIDDLEWARE`` list.

::

    RELAY = {"BACKEND": "postgresql://…/app", "LEASE": 30, "QUEUE_LEASE": 300}
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.redis.RedisBroker",
        "OPTIONS": {"url": "redis://localhost:6379/0"},
        "MIDDLEWARE": [..., "dramatiq.middleware.Retries", "relay_dramatiq.django.RelayMiddleware"],
    }
"""

from __future__ import annotations

from typing import Any

import relay_dramatiq
from relay.settings import from_django

__all__ = ["RelayMiddleware"]


class RelayMiddleware(relay_dramatiq.RelayMiddleware[Any]):
    """:class:`relay_dramatiq.RelayMiddleware` built from ``settings.RELAY`` (Django)."""

    def __init__(self) -> None:
        settings = from_django()
        super().__init__(
            settings.backend,
            lease=settings.lease,
            heartbeat=settings.heartbeat,
            queue_lease=settings.queue_lease,
            tick=settings.tick,
        )
