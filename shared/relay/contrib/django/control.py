"""Pause, resume and trigger jobs in the store ``settings.RELAY`` names, for the admin's actions.

Each goes through :class:`relay.Control`, which every instance obeys at its next tick; claim
backends refuse them (``UnsupportedOption``).
"""

from __future__ import annotations

from collections.abc import Sequence

from relay.contrib.django.store import backend_url
from relay.control import Control
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
    with Control(backend_url()) as control:
        for job in jobs:
            if action == "pause":
                first = control.pause(job, reason or "paused in the Django admin", by=by)
                done.append(f"Paused {job}." if first else f"{job} was already paused.")
            elif action == "resume":
                control.resume(job)
                done.append(f"Resumed {job}.")
            else:
                record = control.trigger(job)
                done.append(f"Triggered {job}: {record.id} ({record.state.value}).")
    return done
