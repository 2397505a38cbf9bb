"""One settings reader for every face: a mapping in, validated keyword arguments out.

Django projects write ``RELAY = {"BACKEND": "redis://…", "LEASE": 30, "HEARTBEAT": 10}`` (or
``"BACKEND": "django"``: the project's own database, see :mod:`relay.contrib.django.database`);
Celery apps may also set ``relay_backend`` / ``relay_lease`` / ``relay_heartbeat`` on
``app.conf``. Both become the same :class:`Settings`. Django is imported only by
:func:`from_django` and :func:`django_backend`, when called.

No face falls back to a store of its own choosing: a backend left unset is ``None`` here, and each
integration either uses a store every instance already shares (the app's Redis broker) or refuses
to start, naming the setting.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from relay.backends._url import redact
from relay.durations import Duration, optional_seconds
from relay.errors import ConfigurationError

__all__ = [
    "DEFAULT_BACKEND",
    "Settings",
    "check_task_name",
    "closest",
    "django_backend",
    "from_django",
    "from_mapping",
    "unknown_settings",
]

DEFAULT_BACKEND = "sqlite:///relay.db"
"""The store of the standalone examples (one host). No integration falls back to it any more."""
_KEYS = {"BACKEND", "LEASE", "HEARTBEAT", "TICK", "QUEUE_LEASE", "SCHEDULABLE_TASKS"}


@dataclass(frozen=True)
class Settings:
    """Where runs are decided and how long a lease lasts; ``None`` means not set (the default)."""

    backend: str | None = None
    """The backend URL, or ``None`` when the settings do not name one."""
    lease: float | None = None
    heartbeat: float | None = None
    tick: float | None = None
    queue_lease: float | None = None
    """Lease a scheduler takes on a run it enqueues for a worker: it must outlive the queue wait."""
    schedulable_tasks: tuple[str, ...] = ()
    """Task names stored schedules may run on this host (Celery's ``relay_schedulable_tasks``;
    Dramatiq's ``RelayMiddleware(schedulable=...)``, actor names)."""

    def __repr__(self) -> str:
        """The settings, with the backend URL's secrets as ``***``."""
        backend = None if self.backend is None else redact(self.backend)
        return (
            f"Settings(backend={backend!r}, lease={self.lease!r}, heartbeat={self.heartbeat!r}, "
            f"tick={self.tick!r}, queue_lease={self.queue_lease!r}, "
            f"schedulable_tasks={self.schedulable_tasks!r})"
        )


def from_mapping(values: Mapping[str, Any], *, source: str = "RELAY") -> Settings:
    """Read ``BACKEND``, ``LEASE``, ``HEARTBEAT``, ``TICK``, ``QUEUE_LEASE`` and
    ``SCHEDULABLE_TASKS`` (any case).

    Unknown keys and bad values raise :class:`ConfigurationError` naming ``source`` and the key
    (and, for a misspelled key, the closest known one).
    """
    if not isinstance(values, Mapping):
        raise ConfigurationError(
            f"{source} must be a dict such as {{'BACKEND': 'sqlite:///relay.db'}}, "
            f"not {type(values).__name__}"
        )
    upper = {str(key).upper(): value for key, value in values.items()}
    unknown = sorted(set(upper) - _KEYS)
    if unknown:
        raise unknown_settings(source, unknown, _KEYS, noun="key")
    backend = upper.get("BACKEND")
    if backend is not None and (not isinstance(backend, str) or "://" not in backend):
        raise ConfigurationError(
            f"{source}['BACKEND'] must be a backend URL such as 'redis://localhost:6379/0', "
            f"got {redact(backend)!r}"
            if isinstance(backend, str)
            else f"{source}['BACKEND'] must be a backend URL, not {type(backend).__name__}"
        )
    return Settings(
        backend=backend,
        lease=_duration(upper.get("LEASE"), source, "LEASE"),
        heartbeat=_duration(upper.get("HEARTBEAT"), source, "HEARTBEAT"),
        tick=_duration(upper.get("TICK"), source, "TICK"),
        queue_lease=_duration(upper.get("QUEUE_LEASE"), source, "QUEUE_LEASE"),
        schedulable_tasks=_task_names(upper.get("SCHEDULABLE_TASKS"), source),
    )


def from_django() -> Settings:
    """Read ``settings.RELAY`` from a configured Django project (nothing set if it is absent)."""
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


def unknown_settings(
    source: str, unknown: Iterable[str], known: Iterable[str], *, noun: str = "setting"
) -> ConfigurationError:
    """The error for misspelled settings: each unknown one, the closest known one, all known ones.

    A misspelled setting must stop a process, never be ignored: ignored, it silently leaves the
    default in place (another store, another lease) on one host and not on the others.
    """
    known = sorted(known)
    names = []
    for name in unknown:
        close = closest(name, known)
        names.append(f"{name} (did you mean {close}?)" if close else name)
    return ConfigurationError(
        f"{source} has unknown {noun}(s) {', '.join(names)}; known: {', '.join(known)}"
    )


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` most likely misspells (ignoring case), or ``None``."""
    folded = {str(candidate).lower(): str(candidate) for candidate in known}
    close = difflib.get_close_matches(name.lower(), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def check_task_name(name: object, what: str = "task name") -> str:
    """A task name stored schedules may name: a non-empty printable string without ``@``."""
    if not isinstance(name, str) or not name or "@" in name or not name.isprintable():
        raise ConfigurationError(
            f"{what} {name!r} must be a non-empty string without '@' or control characters"
        )
    return name


def _task_names(value: object, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    what = f"{source}['SCHEDULABLE_TASKS']"
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ConfigurationError(
            f"{what} must be a list of task names such as ['proj.tasks.report'], got {value!r}"
        )
    return tuple(sorted({check_task_name(name, f"{what}: task name") for name in value}))


def _duration(value: Duration | None, source: str, key: str) -> float | None:
    try:
        return optional_seconds(value, f"{source}['{key}']")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (seconds, or a timedelta)") from None
