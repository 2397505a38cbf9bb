"""One settings reader for every face: a mapping in, validated keyword arguments out.

Django projects write ``RELAY = {"BACKEND": "redis://…", "LEASE": 30, "HEARTBEAT": 10}`` (or
``"BACKEND": "django"``: the project's own database, see :mod:`relay.contrib.django.database`);
Celery apps may also set ``relay_backend`` / ``relay_lease`` / ``relay_heartbeat`` on
``app.conf``. Both become the same :class:`Settings`. Django is imported only by
:func:`from_django`, when called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.durations import Duration, optional_seconds
from relay.errors import ConfigurationError

__all__ = ["DEFAULT_BACKEND", "Settings", "django_backend", "from_django", "from_mapping"]

DEFAULT_BACKEND = "sqlite:///relay.db"
_KEYS = {"BACKEND", "LEASE", "HEARTBEAT", "TICK", "QUEUE_LEASE"}


@dataclass(frozen=True)
class Settings:
    """Where runs are decided and how long a lease lasts; ``None`` means the backend's default."""

    backend: str = DEFAULT_BACKEND
    lease: float | None = None
    heartbeat: float | None = None
    tick: float | None = None
    queue_lease: float | None = None
    """Lease a scheduler takes on a run it enqueues for a worker: it must outlive the queue wait."""


def from_mapping(values: Mapping[str, Any], *, source: str = "RELAY") -> Settings:
    """Read ``BACKEND``, ``LEASE``, ``HEARTBEAT``, ``TICK`` and ``QUEUE_LEASE`` (any case).

    Unknown keys and bad values raise :class:`ConfigurationError` naming ``source`` and the key.
    """
    upper = {str(key).upper(): value for key, value in values.items()}
    unknown = sorted(set(upper) - _KEYS)
    if unknown:
        raise ConfigurationError(
            f"{source} has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}"
        )
    backend = upper.get("BACKEND", DEFAULT_BACKEND)
    if not isinstance(backend, str) or "://" not in backend:
        raise ConfigurationError(
            f"{source}['BACKEND'] must be a backend URL such as 'sqlite:///relay.db', "
            f"got {backend!r}"
        )
    return Settings(
        backend=backend,
        lease=_duration(upper.get("LEASE"), source, "LEASE"),
        heartbeat=_duration(upper.get("HEARTBEAT"), source, "HEARTBEAT"),
        tick=_duration(upper.get("TICK"), source, "TICK"),
        queue_lease=_duration(upper.get("QUEUE_LEASE"), source, "QUEUE_LEASE"),
    )


def from_django() -> Settings:
    """Read ``settings.RELAY`` from a configured Django project (defaults if it is absent)."""
    from django.conf import settings  # imported here: the core never needs Django otherwise

    values = getattr(settings, "RELAY", {})
    if not isinstance(values, Mapping):
        raise ConfigurationError(f"settings.RELAY must be a dict, got {type(values).__name__}")
    return from_mapping(django_backend(values), source="settings.RELAY")


def django_backend(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` with ``"BACKEND": "django"`` (the project's database) replaced by its URL."""
    if not any(str(key).upper() == "BACKEND" for key in values):
        return values
    from relay.contrib.django.database import resolve  # Django is configured when we get here

    return resolve(values)


def _duration(value: Duration | None, source: str, key: str) -> float | None:
    try:
        return optional_seconds(value, f"{source}['{key}']")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (seconds, or a timedelta)") from None
