"""Pause, resume and trigger jobs in the store ``settings.RELAY`` names, for the admin's actions.

Each goes through the lease contract's control plane, which every instance obeys at its next
tick. A store without one (a Relay without the control plane) raises ``ConfigurationError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from relay.backends import open_backend
from relay.contrib.django.store import backend_url
from relay.errors import ConfigurationError

__all__ = ["ACTIONS", "apply"]

ACTIONS = {
    "pause": "Pause the selected jobs (their new slots are recorded skipped)",
    "resume": "Resume the selected jobs (missed slots stay skipped)",
    "trigger": "Run the selected jobs now (a manual run each)",
}
"""The admin actions, and what each does."""


def apply(action: str, jobs: Sequence[str], *, by: str, reason: str = "") -> list[str]:
    """Apply ``action`` to each of ``jobs``; return one line per job saying what happened."""
    if action not in ACTIONS:
        raise ConfigurationError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
    done = []
    with _store() as backend:
        for job in jobs:
            if action == "pause":
                first = _method(backend, "pause")(job, reason or "paused in the Django admin", by)
                done.append(f"{job}: paused" if first else f"{job}: was already paused")
            elif action == "resume":
                _method(backend, "resume")(job)
                done.append(f"{job}: resumed")
            else:
                record = _method(backend, "trigger")(job)
                done.append(f"{job}: triggered {record.id} ({record.state.value})")
    return done


@contextmanager
def _store() -> Iterator[Any]:
    backend = open_backend(backend_url())
    try:
        yield backend
    finally:
        backend.close()


def _method(backend: Any, name: str) -> Callable[..., Any]:
    method = getattr(backend, name, None)
    if not callable(method):
        raise ConfigurationError(
            f"{backend.name} cannot {name} jobs: it needs a lease backend with Relay's control "
            "plane (SQLite, PostgreSQL, Redis or NATS key-value)"
        )
    return method  # type: ignore[no-any-return]
