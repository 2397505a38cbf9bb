"""Pause, resume and trigger jobs in the store ``settings.RELAY`` names, for the admin's actions.

Each goes through :class:`relay.Control`, which every instance obeys at its next tick; claim
backends refuse them (``UnsupportedOption``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

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
    with _control() as control:
        for job in jobs:
            if action == "pause":
                first = control.pause(job, reason or "paused in the Django admin", by=by)
                done.append(f"{job}: paused" if first else f"{job}: was already paused")
            elif action == "resume":
                control.resume(job)
                done.append(f"{job}: resumed")
            else:
                record = control.trigger(job)
                done.append(f"{job}: triggered {record.id} ({record.state.value})")
    return done


def _control() -> Any:
    """``relay.Control`` on the store ``settings.RELAY`` names."""
    try:
        module = importlib.import_module("relay.control")
    except ImportError:
        raise ConfigurationError(
            "this Relay has no control plane (relay.Control): upgrade relay-scheduler"
        ) from None
    return module.Control(backend_url())
