"""The middleware configured from Django settings, for django_dramatiq's ``MIDDLEWARE`` list.

::

    RELAY = {"BACKEND": "postgresql://…/app", "LEASE": 30, "QUEUE_LEASE": 300}
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.redis.RedisBroker",
        "OPTIONS": {"url": "redis://localhost:6379/0"},
        "MIDDLEWARE": [..., "dramatiq.middleware.Retries", "relay_dramatiq.django.RelayMiddleware"],
    }

Without ``RELAY["BACKEND"]``, the broker's Redis (``DRAMATIQ_BROKER["OPTIONS"]["url"]`` of a
``RedisBroker``) is used, a store every scheduler and worker already shares; with any other
broker the middleware refuses to start, naming ``RELAY['BACKEND']``. ``RELAY["SCHEDULABLE_TASKS"]``
lists the actors (by name) that stored schedules may run.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import relay_dramatiq
from relay.backends._url import BackendURL
from relay.errors import ConfigurationError
from relay.settings import from_django

__all__ = ["RelayMiddleware"]

log = logging.getLogger("relay.dramatiq")


class RelayMiddleware(relay_dramatiq.RelayMiddleware[Any]):
    """:class:`relay_dramatiq.RelayMiddleware` built from ``settings.RELAY`` (Django).

    ``RELAY["SCHEDULABLE_TASKS"]`` names the actors stored schedules may run (its
    ``schedulable``): ``relay-dramatiq`` looks each up on the broker and refuses to start on one
    it does not have.
    """

    schedulable_source = "RELAY['SCHEDULABLE_TASKS']"

    def __init__(self) -> None:
        settings = from_django()
        super().__init__(
            settings.backend or _broker_backend(),
            lease=settings.lease,
            heartbeat=settings.heartbeat,
            queue_lease=settings.queue_lease,
            tick=settings.tick,
            schedulable=settings.schedulable_tasks,
        )


def _broker_backend() -> str:
    """``DRAMATIQ_BROKER``'s Redis URL, or a ConfigurationError naming ``RELAY['BACKEND']``."""
    from django.conf import settings

    broker = getattr(settings, "DRAMATIQ_BROKER", None) or {}
    url = (broker.get("OPTIONS") or {}).get("url") if isinstance(broker, dict) else None
    kind = str(broker.get("BROKER", "")) if isinstance(broker, dict) else ""
    redis = isinstance(url, str) and urlsplit(url).scheme.lower() in ("redis", "rediss")
    if kind.endswith("RedisBroker") and redis and isinstance(url, str):
        log.info(
            "relay: RELAY['BACKEND'] is not set; deciding runs on the broker's Redis (%s)",
            BackendURL(url).redacted(),
        )
        return url
    raise ConfigurationError(
        "Relay has no backend: set RELAY['BACKEND'] to a store every scheduler and worker "
        "shares, such as 'postgresql://…' or 'redis://…'. Without it Relay uses the broker only "
        "when DRAMATIQ_BROKER is a RedisBroker with an OPTIONS url, and this one is "
        f"{kind or 'unset'}"
    )
