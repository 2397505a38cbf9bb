"""The contract every lease backend keeps for stored schedules (:mod:`relay.stored`).

A store keeps one row per schedule name (:class:`~relay.stored.StoredRow`: its definition as JSON
text, its version, who changed it last and when) and its history, one
:class:`~relay.stored.ScheduleChange` per version. Rules every backend follows:

* **One atomic step per change**: the row, its history entry and the store-wide **revision** are
  written together or not at all (a transaction, one Lua script). Nothing is ever half-written.
* The **revision** is a counter for the whole store, bumped by every change; each row carries the
  revision of its last change. :meth:`ScheduleStore.schedule_changes` returns the rows changed
  after a revision the caller saw, in revision order, so an instance that polls it each tick pays
  one index lookup when nothing changed and O(changes) otherwise, however many schedules exist.
  Revisions become visible in order: a reader never sees revision ``n + 1`` before ``n``.
* A removed schedule keeps its row, without a definition, so instances learn of the removal; its
  history stays. Adding the name again continues its versions. Retention
  (:meth:`ScheduleStore.prune_schedules`) deletes the row and history of a schedule removed before
  its horizon, and only those: a disabled schedule is never pruned. Adding the name after that
  starts again at version 1.
* **Compare-and-swap on the version**: a change based on a version that is no longer current
  raises :class:`~relay.errors.Conflict` naming the current version, when and by whom it changed,
  and changes nothing.
* **A batch is one step too** (:meth:`ScheduleStore.apply_schedules`, what ``relay schedules
  apply`` writes): every change of it is checked against the store first, then all are written
  together, or none (a transaction, one Lua script; on NATS KV, a staged batch committed by one
  swap, see :mod:`relay.backends._nats_schedules`). Its changes take consecutive revisions.
* The store's clock stamps every change (``updated_at``, the history's ``at``).
* Failures to reach the store raise :class:`~relay.errors.BackendUnavailable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeGuard, runtime_checkable

from relay.errors import Conflict, UnknownSchedule
from relay.stored import ScheduleChange, StoredRow

__all__ = ["ScheduleStore", "ScheduleWrite", "checked_write", "stores_schedules"]


@dataclass(frozen=True)
class ScheduleWrite:
    """One change of a batch (:meth:`ScheduleStore.apply_schedules`)."""

    action: Literal["add", "update", "remove"]
    name: str
    definition: str | None
    """The new definition as JSON text; ``None`` for a removal."""
    changes: str
    """What changes, as JSON text, for the history entry."""
    version: int | None = None
    """The version an update or removal is based on (``None`` for an add)."""


@runtime_checkable
class ScheduleStore(Protocol):
    """The schedule half of a lease backend."""

    def add_schedule(self, name: str, definition: str, changes: str, by: str) -> StoredRow:
        """Store a new schedule at version 1 (or the next version of a removed one).

        ``changes`` (JSON text) goes to its history entry with ``by``. Raises
        :class:`~relay.errors.Conflict` (``expected=None``) if a schedule of that name exists.
        """
        ...

    def update_schedule(
        self, name: str, definition: str, changes: str, by: str, version: int
    ) -> StoredRow | None:
        """Replace the definition of schedule ``name`` if it is at ``version``; the new version
        is ``version + 1``. ``None`` if no schedule has the name (or it was removed); raises
        :class:`~relay.errors.Conflict` if it is at another version."""
        ...

    def remove_schedule(
        self, name: str, changes: str, by: str, version: int | None
    ) -> StoredRow | None:
        """Remove schedule ``name`` (if at ``version``, when given): its row keeps no definition
        and a new version. ``None`` if no schedule has the name; ``Conflict`` as for updates."""
        ...

    def apply_schedules(self, writes: Sequence[ScheduleWrite], by: str) -> None:
        """Make every change of ``writes`` (each name at most once) in one atomic step, or none.

        Each is checked against the store before anything is written: an add whose name is
        taken, or an update or removal whose schedule is not at its ``version``, raises
        :class:`~relay.errors.Conflict`; an update or removal of a schedule that is gone raises
        :class:`~relay.errors.UnknownSchedule`. Both name the schedule, and nothing is written.
        The changes take consecutive revisions, in order, and one time on the store's clock.
        """
        ...

    def stored_schedule(self, name: str) -> StoredRow | None:
        """The row of schedule ``name``, or ``None`` if there is none or it was removed."""
        ...

    def stored_schedules(self) -> list[StoredRow]:
        """Every schedule not removed, by name."""
        ...

    def schedule_history(self, name: str) -> list[ScheduleChange]:
        """Every change of schedule ``name``, oldest first (empty if it never existed)."""
        ...

    def schedule_changes(self, since: int, limit: int | None = None) -> list[StoredRow]:
        """Rows whose last change has a revision above ``since`` (removed ones too), by revision:
        the first ``limit`` of them (``None``: all).

        ``since=0`` gives every row. The caller keeps the last row's revision for its next call.
        """
        ...

    def prune_schedules(self, older_than: float, limit: int = 500) -> int:
        """Delete the rows and histories of up to ``limit`` schedules removed more than
        ``older_than`` seconds ago (on the store's clock); return how many.

        Atomic with the changes: a schedule added again meanwhile is not touched.
        """
        ...


def stores_schedules(backend: object) -> TypeGuard[ScheduleStore]:
    """Whether ``backend`` keeps stored schedules (every lease backend does; claim ones do not)."""
    return getattr(backend, "capability", None) == "lease" and isinstance(backend, ScheduleStore)


def checked_write(row: StoredRow | None, write: ScheduleWrite) -> StoredRow | None:
    """``row`` (the current one of ``write``'s schedule, removed or not) if ``write`` may
    change it, else the error every store raises for it."""
    exists = row is not None and row.definition is not None
    if write.action == "add":
        if exists:
            assert row is not None
            raise Conflict(write.name, version=row.version, at=row.updated_at, by=row.updated_by)
        return row
    if not exists:
        raise UnknownSchedule(
            f"no stored schedule named {write.name!r}: it was removed since it was read",
            name=write.name,
        )
    assert row is not None
    if write.version is not None and write.version != row.version:
        raise Conflict(write.name, version=row.version, at=row.updated_at, by=row.updated_by,
                       expected=write.version)  # fmt: skip
    return row
