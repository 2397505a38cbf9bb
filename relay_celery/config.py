"""Relay's settings for a Celery app: ``app.conf.relay_*`` keys, or Django's ``RELAY`` dict.

Both feed the core's one settings reader, :func:`relay.settings.from_mapping`, and are checked
against the backend once, when beat or the worker starts.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from celery import Celery

from relay.backends import LEASE_BACKENDS, Backend, open_backend
from relay.errors import ConfigurationError, UnsupportedOption
from relay.jobs import check_scheduler_options
from relay.settings import Settings, django_backend, from_mapping

__all__ = ["DEFAULT_QUEUE_LEASE", "CelerySettings", "load_settings", "open_checked"]

DEFAULT_QUEUE_LEASE = 300.0
"""Seconds a run published by beat stays leased while its message waits in the queue."""

_CONF_KEYS = {
    "BACKEND": "relay_backend",
    "LEASE": "relay_lease",
    "HEARTBEAT": "relay_heartbeat",
    "QUEUE_LEASE": "relay_queue_lease",
}


@dataclass(frozen=True)
class CelerySettings:
    """Checked settings: the worker's lease and heartbeat, beat's queue lease (0 on claims)."""

    backend: str
    lease: float
    heartbeat: float
    queue_lease: float


def load_settings(app: Celery) -> Settings:
    """Read Django's ``settings.RELAY`` (when Django is configured), then ``app.conf.relay_*``."""
    values: dict[str, Any] = dict(_django_relay())
    for key, conf_key in _CONF_KEYS.items():
        value = app.conf.get(conf_key)
        if value is None:
            continue
        try:
            from_mapping({key: value})
        except ConfigurationError as exc:
            name = f"app.conf.{conf_key} (CELERY_{conf_key.upper()} in Django)"
            raise ConfigurationError(str(exc).replace(f"RELAY['{key}']", name)) from None
        values[key] = value
    return from_mapping(values, source="settings.RELAY")


def open_checked(settings: Settings) -> tuple[Backend, CelerySettings]:
    """Open the backend and check the lease settings against it; the caller closes the backend."""
    backend = open_backend(settings.backend)
    try:
        lease, heartbeat = check_scheduler_options(
            backend, lease=settings.lease, heartbeat=settings.heartbeat
        )
        queue_lease = _queue_lease(backend, settings.queue_lease, lease)
    except Exception as exc:
        backend.close()
        if isinstance(exc, ConfigurationError):
            exc.args = (f"Relay's Celery settings (relay_lease, relay_heartbeat): {exc}",)
        raise
    return backend, CelerySettings(settings.backend, lease, heartbeat, queue_lease)


def _queue_lease(backend: Backend, value: float | None, lease: float) -> float:
    if backend.capability == "claim":
        if value is not None:
            raise UnsupportedOption("queue_lease", backend.name, LEASE_BACKENDS)
        return 0.0
    queue_lease = DEFAULT_QUEUE_LEASE if value is None else value
    if queue_lease < lease:
        raise ConfigurationError(
            f"relay_queue_lease ({queue_lease:g}s) is shorter than relay_lease ({lease:g}s): "
            "a run waiting in the queue would expire before a worker starts it; "
            "set relay_queue_lease to at least the longest time a message may wait"
        )
    return queue_lease


def _django_relay() -> dict[str, Any]:
    """``settings.RELAY`` of a configured Django project, or nothing."""
    if "django.conf" not in sys.modules:
        return {}
    from django.conf import settings

    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return {}
    values = getattr(settings, "RELAY", {})
    if not isinstance(values, dict):
        raise ConfigurationError(f"settings.RELAY must be a dict, got {type(values).__name__}")
    return dict(django_backend(values))  # "BACKEND": "django" is the project's database
