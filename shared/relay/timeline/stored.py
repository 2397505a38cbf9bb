"""Stored schedules on the timeline: which lanes are stored schedules, and their edits as marks.

Read from a lease store's schedule half (:mod:`relay.schedule_store`) only: the rows of every
schedule, removed ones too (``schedule_changes(0)``: a removed schedule's lane keeps its past runs
and says it was removed), and each one's history. Each change of the history is an :class:`Edit`
at the store's time it was made: ``add``, ``edit``, ``pause`` (``enabled`` turned off),
``resume`` (turned on again) or ``remove``, with its version and who made it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from relay.schedule_store import ScheduleStore
from relay.stored import ScheduleChange

__all__ = ["EDITS", "Edit", "StoredLane", "edit_of", "read_stored"]

EDITS = {
    "add": "stored schedule added",
    "edit": "stored schedule edited: from its first slot after the edit",
    "pause": "stored schedule paused (enabled=False): no new slot until resumed",
    "resume": "stored schedule resumed: from its first slot after the resume",
    "remove": "stored schedule removed: runs already leased finished, no new slot",
}
"""Every kind of edit mark, and what it means."""


@dataclass(frozen=True)
class Edit:
    """One change of a stored schedule, placed at ``at`` (the store's clock)."""

    kind: str
    """``add``, ``edit``, ``pause``, ``resume`` or ``remove``."""
    at: datetime
    version: int
    by: str
    fields: tuple[str, ...]
    """The definition fields it changed."""

    @property
    def text(self) -> str:
        """The hover text: what, which version, when, by whom, which fields."""
        changed = f" ({', '.join(self.fields)})" if self.kind == "edit" and self.fields else ""
        return (
            f"{self.kind} v{self.version}{changed} at "
            f"{self.at.isoformat(timespec='milliseconds')} by {self.by}: {EDITS[self.kind]}"
        )


@dataclass(frozen=True)
class StoredLane:
    """What a lane of a stored schedule adds to its runs: its task, state and edits."""

    task: str
    version: int
    """Its latest version."""
    state: str
    """``enabled``, ``paused`` or ``removed``."""
    edits: tuple[Edit, ...]
    """Its edits in the timeline's period, oldest first."""
    earlier: int = 0
    """Its edits before the timeline's period, left out."""


def edit_of(change: ScheduleChange) -> Edit:
    """The mark of one history entry: a change of ``enabled`` alone is a pause or a resume."""
    kind = {"add": "add", "remove": "remove"}.get(change.action, "edit")
    enabled = change.changes.get("enabled")
    if kind == "edit" and isinstance(enabled, list | tuple) and len(enabled) == 2:
        kind = "resume" if enabled[1] else "pause"
    return Edit(kind, change.at, change.version, change.by, tuple(sorted(change.changes)))


def read_stored(
    store: ScheduleStore,
    jobs: Collection[str] = (),
    ran: Collection[str] = (),
    changed_since: datetime | None = None,
) -> dict[str, StoredLane]:
    """Every stored schedule (of ``jobs``, if given), removed ones too, with all its edits.

    With ``changed_since``, only those named in ``jobs`` or ``ran`` (those with runs drawn) or
    changed since then: the history of a schedule that neither ran nor changed is not read.
    """
    lanes = {}
    for row in store.schedule_changes(0):
        if jobs and row.name not in jobs:
            continue
        quiet = changed_since is not None and row.updated_at < changed_since
        if quiet and row.name not in ran and row.name not in jobs:
            continue
        history = store.schedule_history(row.name)
        task, state = _task_and_state(history)
        if row.definition is None:
            state = "removed"
        edits = tuple(edit_of(change) for change in history)
        lanes[row.name] = StoredLane(task, row.version, state, edits)
    return lanes


def _task_and_state(history: list[ScheduleChange]) -> tuple[str, str]:
    """The task and whether enabled, after the last change that named them."""
    task, enabled = "?", True
    for change in history:
        before_after = change.changes.get("task")
        if before_after:
            task = before_after[1] or before_after[0] or task
        switch = change.changes.get("enabled")
        if switch and switch[1] is not None:
            enabled = bool(switch[1])
    return task, "enabled" if enabled else "paused"
