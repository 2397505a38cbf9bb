"""System checks: ``manage.py check`` reports bad Relay settings with Relay's own messages.

* ``relay.E001``: ``settings.RELAY`` cannot be read (unknown key, bad value, bad backend URL,
  lease options a claim backend cannot honour, a heartbeat not shorter than the lease, ``"django"``
  on a database Relay cannot use).
* ``relay.E002``: a ``CELERY_RELAY_*`` setting has a bad value, or is misspelled.
* ``relay.E003``: the backend's driver is not installed (names the extra).
* ``relay.W001``: the store cannot be reached, or did not answer within :data:`PROBE_TIMEOUT`.

The store is probed read-only: a check never creates a file, schema, key or queue. A store that
does not exist yet is fine (the first scheduler or worker to start creates it); claim stores keep
nothing to read and are not probed.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from typing import Any, Literal, cast

from django.conf import settings
from django.core import checks

from relay.backends import capability_of, open_backend
from relay.contract import is_lease
from relay.errors import (
    BackendUnavailable,
    ConfigurationError,
    MissingDependency,
    RelayError,
    StoreNotFound,
)
from relay.jobs import check_scheduler_options
from relay.settings import from_django, from_mapping, unknown_settings

__all__ = ["PROBE_TIMEOUT", "check_settings", "check_store"]

PROBE_TIMEOUT = 5.0
"""Seconds the store check waits for the store to answer."""
CELERY_KEYS = ("BACKEND", "LEASE", "HEARTBEAT", "QUEUE_LEASE")


@checks.register("relay")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``settings.RELAY`` and ``CELERY_RELAY_*``, read as every Relay face reads them."""
    found: list[checks.CheckMessage] = []
    try:
        read = from_django()
        # Without a backend, each integration uses its broker's Redis: a lease store.
        kind = _Kind("lease", "the broker's Redis")
        if read.backend is not None:
            kind = _Kind(capability_of(read.backend), _redacted(read.backend))
        check_scheduler_options(cast(Any, kind), lease=read.lease, heartbeat=read.heartbeat)
    except MissingDependency as exc:
        found.append(checks.Error(str(exc), obj="settings.RELAY", id="relay.E003"))
    except RelayError as exc:
        found.append(checks.Error(str(exc), obj="settings.RELAY", id="relay.E001"))
    return found + _celery_settings()


def _celery_settings() -> list[checks.CheckMessage]:
    """``CELERY_RELAY_*``: misspelled names (where Celery is installed) and bad values."""
    found: list[checks.CheckMessage] = []
    if importlib.util.find_spec("celery") is not None:
        from relay_celery.config import CONF_KEYS

        names = [n for n in dir(settings) if n.startswith("CELERY_RELAY_")]
        unknown = sorted(n for n in names if n[len("CELERY_") :].lower() not in CONF_KEYS)
        if unknown:
            known = sorted(f"CELERY_{key.upper()}" for key in CONF_KEYS)
            error = unknown_settings("Celery's Django settings", unknown, known)
            found.append(checks.Error(str(error), obj=unknown[0], id="relay.E002"))
    for key in CELERY_KEYS:
        name = f"CELERY_RELAY_{key}"
        if getattr(settings, name, None) is None:
            continue
        try:
            from_mapping({key: getattr(settings, name)}, source=name)
        except ConfigurationError as exc:
            message = str(exc).replace(f"{name}['{key}']", name)
            found.append(checks.Error(message, obj=name, id="relay.E002"))
    return found


@checks.register("relay")
def check_store(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Whether the store ``settings.RELAY`` names answers (read-only; lease stores only)."""
    try:
        url = from_django().backend
        if url is None or capability_of(url) == "claim":
            return []
    except RelayError:
        return []  # check_settings reports it
    outcome: list[checks.CheckMessage] = []
    probe = threading.Thread(target=_probe, args=(url, outcome), daemon=True)
    probe.start()
    probe.join(PROBE_TIMEOUT)
    if probe.is_alive():
        return [_unreachable(f"the store at {_redacted(url)} did not answer within "
                             f"{PROBE_TIMEOUT:g} s")]  # fmt: skip
    return outcome


def _probe(url: str, outcome: list[checks.CheckMessage]) -> None:
    try:
        backend = open_backend(url, read_only=True)
        try:
            if is_lease(backend):  # always: open_backend refuses claim stores read-only
                backend.runs(None, 1)
        finally:
            backend.close()
    except StoreNotFound:
        pass  # not created yet: the first scheduler or worker to start creates it
    except MissingDependency as exc:
        outcome.append(checks.Error(str(exc), obj="settings.RELAY", id="relay.E003"))
    except BackendUnavailable as exc:
        outcome.append(_unreachable(str(exc)))
    except RelayError as exc:
        outcome.append(checks.Error(str(exc), obj="settings.RELAY", id="relay.E001"))


def _unreachable(message: str) -> checks.CheckMessage:
    return checks.Warning(
        f"Relay's store is unreachable: {message}",
        hint=(
            "schedulers and workers start and wait for it (logging store_waiting), running "
            "nothing until it answers; check RELAY['BACKEND']"
        ),
        obj="settings.RELAY",
        id="relay.W001",
    )


def _redacted(url: str) -> str:
    from relay.backends._url import BackendURL

    return BackendURL(url).redacted()


@dataclass(frozen=True)
class _Kind:
    """What :func:`relay.jobs.check_scheduler_options` reads of a backend, without opening it."""

    capability: Literal["claim", "lease"]
    name: str
