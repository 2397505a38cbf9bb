"""Stored schedules applied to a running instance: the rule, written once for every host.

Each :meth:`~relay.engine.looping.Loop.step` calls :meth:`ScheduleFeed.apply`, which asks the store
for the schedules changed since the revision it last saw (one index lookup when nothing changed)
and applies each change to the :class:`~relay.engine.deciding.Decider` before the tick:

* added, changed or resumed: the schedule's job replaces the old one, due from its first slot
  after the change (:func:`relay.stored.schedule_job`): a change never fires a run at once, and
  the slots before it are not caught up because of it. Runs already won keep the job (task and
  arguments) they were won with, and so does a run another instance takes over or retries: its
  record keeps the version it was first leased with, and :meth:`ScheduleFeed.job_at` rebuilds
  that version from the schedule's history (if its task is not allowed here, the run is reported
  and handed back, never run with other arguments);
* paused (``enabled=False``) or removed: the decider stops deciding it; runs in flight finish;
* a task this instance does not allow, or a code job's name: not run here, reported by a
  :class:`~relay.events.ScheduleNotRunnable` event (once per version), never skipped silently.

A host gives the feed ``handler_for``: the handler of a schedule's task, or ``None`` if it does not
allow the task (it raises :class:`~relay.errors.ConfigurationError` for options it refuses: the
schedule is then not runnable there). The standalone scheduler binds the task's function to the
stored arguments; Celery beat binds the task's name to the stored arguments and publish options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from relay.engine.deciding import Decider
from relay.errors import BackendUnavailable, ConfigurationError
from relay.events import ScheduleApplied, ScheduleNotRunnable
from relay.jobs import Job
from relay.schedule_store import ScheduleStore
from relay.stored import Schedule, StoredRow, from_row, row_at, schedule_job

__all__ = ["ScheduleFeed"]

log = logging.getLogger("relay.engine")

PAGE = 1000
"""Rows read at once: an instance starting on 100,000 schedules never holds them all as rows."""
HandlerFor = Callable[[Schedule], "Callable[..., Any] | None"]


class ScheduleFeed:
    """Applies a store's stored schedules to one decider, change by change."""

    def __init__(
        self,
        decider: Decider,
        store: ScheduleStore,
        handler_for: HandlerFor,
        *,
        allowed: str = "",
        active: bool = True,
        allow_with: str = "@scheduler.task",
    ) -> None:
        self.decider = decider
        self.active = active
        """Whether :meth:`apply` reads the store. A host that allows no task leaves it off: no
        stored schedule can run there, and its idle tick then asks the store nothing."""
        self.store = store
        self.handler_for = handler_for
        self.allowed = allowed
        """The tasks this instance allows, for messages (``"a, b"``)."""
        self.allow_with = allow_with
        """How a task is allowed on this host, for messages (``relay_celery.schedulable``)."""
        self.revision = 0
        """The store's revision this instance has applied."""
        self.stored: dict[str, int] = {}
        """The stored schedules the decider holds now: name -> version."""
        self.not_runnable: dict[str, str] = {}
        """Stored schedules not run here, and why."""
        self._code: set[str] | None = None
        decider.schedule_versions = self.stored
        decider.job_at_version = self.job_at

    def start_when_reachable(self) -> None:
        """:meth:`start`, or a warning while the store cannot be reached: the loop's steps apply
        the stored schedules once it answers. What every host calls before its loop."""
        try:
            self.start()
        except BackendUnavailable as exc:
            log.warning("could not read the stored schedules yet: %s", exc)

    def start(self) -> None:
        """Apply every stored schedule now; refuse a code job that has a stored schedule's name.

        A host calls it before its loop, so an instance whose code job collides with a stored
        schedule refuses to start (:class:`~relay.errors.ConfigurationError` naming both).
        """
        self._code = set(self.decider.jobs) - set(self.stored)
        # One read of the stored names, not one per code job: 100,000 code jobs start fast. No
        # code job, no read: 100,000 stored schedules are then read once, page by page.
        stored = (r.name for r in self.store.stored_schedules()) if self._code else ()
        clash = sorted(self._code.intersection(stored))
        if clash:
            raise ConfigurationError(
                f"this instance defines code job(s) {', '.join(map(repr, clash))} and the store "
                "holds stored schedule(s) of the same name: rename the code job, or remove the "
                "stored schedule (relay schedules rm NAME)"
            )
        self.apply()

    def apply(self) -> bool:
        """Apply the changes since the last call; ``True`` if there were any (tick at once)."""
        if not self.active:
            return False
        if self._code is None:
            self._code = set(self.decider.jobs) - set(self.stored)
        changed = False
        while rows := self.store.schedule_changes(self.revision, PAGE):
            for row in rows:
                self._apply(row)
                self.revision = max(self.revision, row.revision)
            changed = True
            if len(rows) < PAGE:
                break
        return changed

    def job_at(self, job: Job, version: int) -> Job | None:
        """The job of stored schedule ``job.name`` as it was at ``version``, from its history:
        a run leased with that version runs with its task and arguments. ``None`` (reported by a
        :class:`~relay.events.ScheduleNotRunnable` event) if it cannot run here."""
        row = row_at(self.store.schedule_history(job.name), version)
        if row is None:
            gone = Schedule(name=job.name, task="?", version=version)
            self._report(gone, f"its history has no definition at version {version}")
            return None
        try:
            schedule = from_row(row)
        except (ValueError, TypeError, KeyError) as exc:
            gone = Schedule(name=job.name, task="?", version=version)
            self._report(gone, f"its definition at version {version} cannot be read: {exc!r}")
            return None
        handler = self.handler_for(schedule)
        if handler is None:
            self._report(
                schedule,
                f"a run leased with version {version} needs task {schedule.task!r}, which this "
                f"instance does not allow (it allows: {self.allowed or 'none'}): handed back; "
                f"allow it with @scheduler.task({schedule.task!r})",
            )
            return None
        try:
            return schedule_job(self.decider.backend, schedule, handler)
        except ConfigurationError as exc:
            self._report(schedule, f"its definition at version {version} is refused here: {exc}")
            return None

    def _apply(self, row: StoredRow) -> None:
        name = row.name
        if row.definition is None:
            self._drop(name, row, "removed")
            return
        try:
            schedule = from_row(row)
        except (ValueError, TypeError, KeyError) as exc:  # a row written by hand, say
            schedule = Schedule(name=name, task="?", version=row.version)
            self._refuse(schedule, f"its stored definition cannot be read: {exc!r}")
            return
        if name in (self._code or ()):
            self._refuse(schedule, "a code-defined job of this instance has this name: rename one")
            return
        if not schedule.enabled:
            self._drop(name, row, "paused")
            return
        try:
            handler = self.handler_for(schedule)  # a host may refuse its options: an error
            if handler is None:
                self._refuse(
                    schedule,
                    f"this instance does not allow task {schedule.task!r} (it allows: "
                    f"{self.allowed or 'none'}); allow it with {self.allow_with}"
                    f"({schedule.task!r})",
                )
                return
            job = schedule_job(self.decider.backend, schedule, handler)
        except ConfigurationError as exc:  # written by another Relay version, or by hand
            self._refuse(schedule, f"its definition is refused here: {exc}")
            return
        self.decider.replace(job)
        self.stored[name] = row.version
        self.not_runnable.pop(name, None)
        self._emit(row, "scheduled")

    def _drop(self, name: str, row: StoredRow, action: str) -> None:
        if self.stored.pop(name, None) is not None:
            self.decider.remove(name)
        self.not_runnable.pop(name, None)
        self._emit(row, action)

    def _refuse(self, schedule: Schedule, reason: str) -> None:
        if self.stored.pop(schedule.name, None) is not None:
            self.decider.remove(schedule.name)
        self.not_runnable[schedule.name] = reason
        self._report(schedule, reason)

    def _report(self, schedule: Schedule, reason: str) -> None:
        self.decider.events.emit(
            ScheduleNotRunnable(
                schedule=schedule.name, version=schedule.version, task=schedule.task,
                owner=self.decider.owner, reason=reason,
            )
        )  # fmt: skip

    def _emit(self, row: StoredRow, action: str) -> None:
        self.decider.events.emit(
            ScheduleApplied(
                schedule=row.name, version=row.version, action=action,
                owner=self.decider.owner, changed_at=row.updated_at,
            )
        )  # fmt: skip
