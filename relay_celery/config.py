"""Relay's settings for a Celery app: ``app.conf.relay_*`` keys, or Django's ``RELAY`` dict.

Both feed the core's one settings reader, :func:`relay.settings.from_mapping`, and are checked
against the backend once, when beat or the worker starts. Lowest first: the options given to
``relay_celery.install(app, ...)``, then ``settings.RELAY``, then ``app.conf.relay_*``
(``CELERY_RELAY_*`` in Django). A ``relay_*`` key Relay does not know stops the process, and so
does a missing backend, unless the app's broker is a Redis every beat and worker already shares
(directly, or through Redis Sentinel).
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from celery import Celery

from relay.backends import LEASE_BACKENDS, Backend, one_host_warning, open_or_defer
from relay.backends._url import BackendURL
from relay.errors import ConfigurationError, UnsupportedOption
from relay.jobs import check_scheduler_options
from relay.settings import Settings, django_backend, from_mapping, unknown_settings
from relay_celery._sentinel import is_sentinel_broker, sentinel_store_url

__all__ = [
    "CONF_KEYS",
    "DEFAULT_QUEUE_LEASE",
    "CelerySettings",
    "load_settings",
    "open_checked",
    "remember_install_options",
]

log = logging.getLogger("relay.celery")

DEFAULT_QUEUE_LEASE = 300.0
"""Seconds a run published by beat stays leased while its message waits in the queue."""

_CONF_KEYS = {
    "BACKEND": "relay_backend",
    "LEASE": "relay_lease",
    "HEARTBEAT": "relay_heartbeat",
    "QUEUE_LEASE": "relay_queue_lease",
    "SCHEDULABLE_TASKS": "relay_schedulable_tasks",
}
CONF_KEYS = frozenset({*_CONF_KEYS.values(), "relay_jobs"})
"""Every ``app.conf`` key Relay reads; any other ``relay_*`` key is refused as a typo."""
_REDIS_SCHEMES = {"redis", "rediss"}
_install_options: weakref.WeakKeyDictionary[Celery, dict[str, Any]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class CelerySettings:
    """Checked settings: the worker's lease and heartbeat, beat's queue lease (0 on claims)."""

    backend: str
    lease: float
    heartbeat: float
    queue_lease: float
    capability: Literal["claim", "lease"] = "lease"


def remember_install_options(app: Celery, **options: Any) -> None:
    """Keep the settings given to ``install(app, ...)``: the lowest layer, checked now."""
    values = {key.upper(): value for key, value in options.items() if value is not None}
    from_mapping(values, source="relay_celery.install()")
    _install_options[app] = {**_install_options.get(app, {}), **values}


def load_settings(app: Celery) -> Settings:
    """Read ``install()``'s options, Django's ``settings.RELAY``, then ``app.conf.relay_*``.

    Unknown ``relay_*`` keys raise :class:`ConfigurationError` naming the closest known one. With
    no backend anywhere, the app's broker is used if it is Redis; otherwise the error names
    ``relay_backend``: Relay never falls back to a store of its own on each host.
    """
    _check_conf_keys(app)
    values: dict[str, Any] = {**_install_options.get(app, {}), **_django_relay()}
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
    settings = from_mapping(values, source="settings.RELAY")
    if settings.backend is None:
        settings = replace(settings, backend=_broker_backend(app))
    return settings


def _check_conf_keys(app: Celery) -> None:
    """Refuse ``relay_*`` keys (``<NAMESPACE>_RELAY_*`` with a namespace) Relay does not read."""
    namespace = getattr(app, "namespace", None)
    prefix = f"{namespace.rstrip('_')}_".upper() if namespace else None
    plain, namespaced = [], []
    for key in app.conf:
        if not isinstance(key, str):
            continue
        if key.startswith("relay_") and key not in CONF_KEYS:
            plain.append(key)
        elif prefix and key.startswith(f"{prefix}RELAY_") and _unknown(key[len(prefix) :]):
            namespaced.append(key)
    if plain:
        raise unknown_settings("app.conf", sorted(plain), CONF_KEYS)
    if namespaced:
        known = [f"{prefix}{key.upper()}" for key in CONF_KEYS]
        raise unknown_settings("Celery's Django settings", sorted(namespaced), known)


def _unknown(key: str) -> bool:
    return key.lower() not in CONF_KEYS


def _broker_backend(app: Celery) -> str:
    """The app's broker URL if it is Redis (a store every beat and worker shares), else refuse.

    kombu's Redis Sentinel broker (``sentinel://…;sentinel://…``) becomes the same store
    reached through the same sentinels, a ``redis+sentinel://`` URL.
    """
    broker = app.conf.broker_url
    if is_sentinel_broker(broker):
        options = app.conf.broker_transport_options or {}
        url = sentinel_store_url(broker, options, app.conf.broker_use_ssl)
        log.info(
            "relay: relay_backend is not set; deciding runs on the broker's Redis, through its "
            "sentinels (%s)",
            BackendURL(url).redacted(),
        )
        return url
    redis = isinstance(broker, str) and urlsplit(broker).scheme.lower() in _REDIS_SCHEMES
    if isinstance(broker, str) and redis and ";" not in broker:
        log.info(
            "relay: relay_backend is not set; deciding runs on the broker's Redis (%s)",
            BackendURL(broker).redacted(),
        )
        return broker
    described = "none set"
    if isinstance(broker, str):
        described = BackendURL(broker).redacted() if "://" in broker else repr(broker)
    raise ConfigurationError(
        "Relay has no backend: set app.conf.relay_backend (CELERY_RELAY_BACKEND or "
        "RELAY['BACKEND'] with Django) to a store every beat and worker shares, such as "
        "'postgresql://…' or 'redis://…'. Without it Relay uses the app's broker only when that "
        f"is Redis or Redis Sentinel, and this app's broker is {described}"
    )


def open_checked(settings: Settings) -> tuple[Backend, CelerySettings]:
    """Open the backend and check the lease settings against it; the caller closes the backend.

    A store that cannot be reached now is opened deferred (its first use opens it): beat and the
    worker start and wait for it. A store that serves one host (SQLite) is logged as a warning:
    Celery apps span hosts.
    """
    if settings.backend is None:
        raise ConfigurationError("Relay has no backend: set app.conf.relay_backend")
    backend = open_or_defer(settings.backend)
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
    warning = one_host_warning(backend)
    if warning is not None:
        log.warning("relay: %s", warning)
    return backend, CelerySettings(
        settings.backend, lease, heartbeat, queue_lease, backend.capability
    )


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
