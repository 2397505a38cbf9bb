"""Stored schedules from the control plane: add, change, remove and read them, with their history.

Mixed into :class:`relay.Control`. Every change is checked here, before the store sees it, with the
rules of code-defined jobs (:func:`relay.stored.check_schedule`), then written in one atomic step
that compares versions (:mod:`relay.schedule_store`). Running instances apply it at their next tick.
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, tzinfo
from functools import cached_property
from itertools import islice
from typing import Any, Literal

from relay import arguments as check
from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.definitions import Choice
from relay.durations import Duration
from relay.errors import (
    ConfigurationError,
    Conflict,
    InvalidArgument,
    UnknownSchedule,
    UnsupportedOption,
)
from relay.health import is_alive
from relay.jobs import LEASE_BACKENDS, Overlap
from relay.runs import RunRecord
from relay.schedule_store import ScheduleStore, stores_schedules
from relay.stored import (
    DEFINITION,
    Schedule,
    ScheduleChange,
    changes_between,
    check_schedule,
    from_row,
    recheck,
    schedule_job,
    to_definition,
)

__all__ = ["JobStatus", "ScheduleChecks", "ScheduleControl", "describe", "operator"]

_KINDS = ("cron", "every", "at")
_CENTURY = timedelta(days=36525)
_SHOWN = 1000
"""The most slots left ``relay jobs`` counts."""


@dataclass(frozen=True)
class JobStatus:
    """One job as ``relay jobs`` shows it."""

    name: str
    schedule: str | None
    """As registered by its schedulers, e.g. ``"cron '0 3 * * *' (Europe/Paris)"``; ``None`` for a
    job no scheduler of this Relay version registered."""
    timezone: str | None
    next_due: datetime | None
    """When its next slot starts (its jitter included), on the store's clock."""
    last_run: RunRecord | None
    live: tuple[RunRecord, ...]
    """Its runs holding a live lease: each has its ``owner`` and ``expires_at``."""
    paused_at: datetime | None
    paused_by: str | None
    paused_reason: str | None
    spec: dict[str, Any]
    stored: str | None = None
    """For a stored schedule: where it can run and what remains of it, such as ``"task
    send_report, on 2 live instance(s); 3 slot(s) left"`` or ``"not runnable: no live instance
    allows task send_report"``. ``None`` for a code-defined job."""
    definition: Choice | None = None
    """The definition deciding the job among the live instances' declarations, with the other
    definitions some of them hold (``definition.others``: a rolling deploy changed the job, and
    those instances do not fire it). ``None`` if no live instance declares the job (a stored
    schedule, Relay 0.1.0 instances only). See :mod:`relay.definitions`."""

    @property
    def disagreement(self) -> bool:
        """Whether live instances hold more than one definition of the job."""
        return self.definition is not None and bool(self.definition.others)

    @property
    def paused(self) -> bool:
        """Whether the job is paused."""
        return self.paused_at is not None


class ScheduleControl:
    """The stored-schedule half of :class:`relay.Control`."""

    backend: ClaimBackend | LeaseBackend

    def add_schedule(
        self,
        name: str,
        task: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        at: datetime | None = None,
        tz: str | tzinfo | None = None,
        args: Any = (),
        kwargs: Any = None,
        enabled: bool = True,
        start: datetime | None = None,
        end: datetime | None = None,
        max_runs: int | None = None,
        overlap: Overlap | None = None,
        catch_up: Duration | None = None,
        max_attempts: int | None = None,
        stale_after: Duration | None = None,
        jitter: Duration | None = None,
        options: Any = None,
        description: str = "",
        by: str | None = None,
        force: bool = False,
        expect_success_within: Duration | Literal[False] | None = None,
        alert_after_failures: int | None = None,
    ) -> Schedule:
        """Store a new schedule: every running instance that allows ``task`` runs it from its
        first slot after now (never at once). Returns it at version 1.

        Checked first with the rules of code-defined jobs; ``task`` must be allowed by a live
        instance (``@scheduler.task(name)``) unless ``force=True``; the name may not be a code
        job's. ``Conflict`` if a schedule of that name exists. ``by`` defaults to ``user@host``.
        """
        check.name(name, "name")
        check.name(task, "task")
        _check_by(by)
        store = self._schedule_store("add_schedule")
        schedule = check_schedule(
            self._lease_backend(), name, task, cron=cron, every=every, at=at, tz=tz, args=args,
            kwargs=kwargs,
            enabled=enabled, start=start, end=end, max_runs=max_runs, overlap=overlap,
            catch_up=catch_up, max_attempts=max_attempts, stale_after=stale_after,
            jitter=jitter, options=options, description=description,
            expect_success_within=expect_success_within, alert_after_failures=alert_after_failures,
        )  # fmt: skip
        definition = _sized(schedule)
        self.checks(force=force).added(schedule)
        row = store.add_schedule(
            name, definition, _json(changes_between(None, schedule)), by or operator()
        )
        return from_row(row)

    def update_schedule(
        self,
        name: str,
        *,
        version: int,
        by: str | None = None,
        force: bool = False,
        **changes: Any,
    ) -> Schedule:
        """Change some fields of schedule ``name``, if it is still at ``version``.

        ``changes`` are :meth:`add_schedule`'s options (``enabled=False`` pauses it,
        ``enabled=True`` resumes it). Giving one of ``cron``, ``every`` and ``at`` replaces the
        others. The change takes effect from the first slot after it, never fires a run at once,
        and a run in flight finishes as it was. A change that changes nothing makes no version.
        ``Conflict`` (naming the current version, when and by whom) if it is not at ``version``.
        """
        check.name(name, "name")
        check.count(version, "version")
        _check_by(by)
        store = self._schedule_store("update_schedule")
        unknown = sorted(set(changes) - set(DEFINITION))
        if unknown:
            raise ConfigurationError(
                f"update_schedule cannot change {', '.join(unknown)}: the fields are "
                f"{', '.join(DEFINITION)}"
            )
        current = self.schedule(name)
        if current.version != version:
            raise Conflict(name, version=current.version, at=current.updated_at,
                           by=current.updated_by, expected=version)  # fmt: skip
        if any(kind in changes for kind in _KINDS):
            cleared = {kind: None for kind in (*_KINDS, "tz") if kind not in changes}
            changes = {**cleared, **changes}
        if "tz" in changes and changes["tz"] is not None and "cron" not in changes:
            changes.setdefault("cron", current.cron)
        updated = recheck(self._lease_backend(), replace(current, **changes))
        diff = changes_between(current, updated)
        if not diff:
            return current
        definition = _sized(updated)
        self.checks(force=force).updated(updated, diff)
        row = store.update_schedule(name, definition, _json(diff), by or operator(), version)
        if row is None:
            raise self._unknown(store, name)
        return from_row(row)

    def remove_schedule(
        self, name: str, *, version: int | None = None, by: str | None = None
    ) -> None:
        """Remove schedule ``name`` (if at ``version``, when given): no new slot starts; a run in
        flight finishes; its history and runs stay until retention prunes them."""
        check.name(name, "name")
        if version is not None:
            check.count(version, "version")
        _check_by(by)
        store = self._schedule_store("remove_schedule")
        current = store.stored_schedule(name)
        if current is None:
            raise self._unknown(store, name)
        diff = changes_between(from_row(current), None)
        if store.remove_schedule(name, _json(diff), by or operator(), version) is None:
            raise self._unknown(store, name)

    def schedule(self, name: str) -> Schedule:
        """Stored schedule ``name``; :class:`~relay.errors.UnknownSchedule` if there is none."""
        check.name(name, "name")
        store = self._schedule_store("schedule")
        row = store.stored_schedule(name)
        if row is None:
            raise self._unknown(store, name)
        return from_row(row)

    def schedules(self) -> list[Schedule]:
        """Every stored schedule, by name."""
        return [from_row(row) for row in self._schedule_store("schedules").stored_schedules()]

    def schedule_history(self, name: str) -> list[ScheduleChange]:
        """Every change of schedule ``name``, oldest first (removed schedules keep theirs)."""
        check.name(name, "name")
        store = self._schedule_store("schedule_history")
        history = store.schedule_history(name)
        if not history:
            raise self._unknown(store, name)
        return history

    def allowed_tasks(self) -> dict[str, tuple[str, ...]]:
        """The tasks each live instance allows, by owner (from their heartbeats)."""
        self._schedule_store("allowed_tasks")
        store = self._lease_backend()
        now = store.now()
        return {i.owner: i.tasks for i in store.instances() if is_alive(i, now)}

    def _with_stored(
        self,
        statuses: list[JobStatus],
        now: datetime,
        stored: Mapping[str, Schedule] | None = None,
    ) -> list[JobStatus]:
        """``relay jobs``'s rows, with each stored schedule's note (and a row for each stored
        schedule no instance registered: one no live instance can run); ``stored``: only these
        stored schedules (default: every one)."""
        if not stores_schedules(self.backend):
            return statuses
        if stored is None:
            stored = {s.name: s for s in self.schedules()}
        allowed = self.allowed_tasks()
        by_name = {status.name: status for status in statuses}
        for name, schedule in stored.items():
            note = self._note(schedule, allowed, now)
            found = by_name.get(name)
            if found is None:
                runs = self._lease_backend().runs(name, limit=1)
                found = JobStatus(
                    name=name, schedule=describe(schedule), timezone=schedule.tz, next_due=None,
                    last_run=runs[0] if runs else None, live=(), paused_at=None, paused_by=None,
                    paused_reason=None, spec={},
                )  # fmt: skip
            by_name[name] = replace(found, stored=note)
        return [by_name[name] for name in sorted(by_name)]

    def _note(self, schedule: Schedule, allowed: dict[str, tuple[str, ...]], now: datetime) -> str:
        hosts = sum(1 for tasks in allowed.values() if schedule.task in tasks)
        if not hosts:
            return f"not runnable: no live instance allows task {schedule.task}"
        note = f"task {schedule.task}, on {hosts} live instance(s)"
        if not schedule.enabled:
            return note + "; paused (enabled=False)"
        if schedule.max_runs is None and schedule.end is None and schedule.at is None:
            return note
        slots = schedule_job(self._lease_backend(), schedule, None).schedule
        left = len(list(islice(slots.slots_between(now, now + _CENTURY), _SHOWN + 1)))
        if not left:
            return note + "; ended"
        return note + f"; {left if left <= _SHOWN else f'over {_SHOWN}'} slot(s) left"

    # -- checks ----------------------------------------------------------------------------

    def _schedule_store(self, operation: str) -> ScheduleStore:
        backend = self.backend
        if not stores_schedules(backend):
            raise UnsupportedOption(operation, backend.name, LEASE_BACKENDS)
        return backend

    def _lease_backend(self) -> LeaseBackend:
        backend = self.backend
        assert is_lease(backend)  # checked by _schedule_store
        return backend

    def checks(self, *, force: bool = False) -> ScheduleChecks:
        """The checks of :meth:`add_schedule` and :meth:`update_schedule` that read the store,
        each reading it once however many schedules they check (``force``: any task)."""
        return ScheduleChecks(self, force=force)

    @staticmethod
    def _unknown(store: ScheduleStore, name: str) -> UnknownSchedule:
        names = [row.name for row in store.stored_schedules()]
        known = ", ".join(names[:20]) + (" …" if len(names) > 20 else "") or "none"
        return UnknownSchedule(f"no stored schedule named {name!r}; stored: {known}")


class ScheduleChecks:
    """The rules a stored schedule's change must keep that depend on the store: an ``at`` in the
    future (on the store's clock), a name no code-defined job has, a task a live instance allows
    (unless forced). Each fact is read once, when first needed: checking 100,000 changes costs
    the same few reads as checking one."""

    def __init__(self, control: ScheduleControl, *, force: bool = False) -> None:
        self._control = control
        self._store = control._schedule_store("checks")
        self._force = force

    def added(self, schedule: Schedule) -> None:
        """Refuse a new schedule that breaks a rule (:class:`ConfigurationError` saying why)."""
        self._check_name(schedule.name)
        self._check_at(schedule)
        self._check_task(schedule.task)

    def updated(self, schedule: Schedule, diff: dict[str, Any]) -> None:
        """Refuse a changed schedule (its ``diff`` from the stored one) that breaks a rule."""
        self._check_at(schedule)
        if "task" in diff:
            self._check_task(schedule.task)

    @cached_property
    def _now(self) -> datetime:
        return self._control._lease_backend().now()

    @cached_property
    def _code_jobs(self) -> frozenset[str]:
        jobs = self._control._lease_backend().jobs()
        return frozenset(info.name for info in jobs if not _stored_spec(info.spec))

    @cached_property
    def _allowed(self) -> dict[str, tuple[str, ...]]:
        return self._control.allowed_tasks()

    def _check_task(self, task: str) -> None:
        if self._force or any(task in tasks for tasks in self._allowed.values()):
            return
        offered = sorted({t for tasks in self._allowed.values() for t in tasks})
        live = (
            f"the live instances allow: {', '.join(offered)}"
            if offered
            else "no live instance allows any task"
            if self._allowed
            else "no instance is live"
        )
        raise ConfigurationError(
            f"no live instance allows task {task!r} ({live}). Allow it in the instances' code "
            f"with @scheduler.task({task!r}) (relay_celery.schedulable on Celery beat, "
            "relay_dramatiq.schedulable on relay-dramatiq) and "
            "start them, or pass force=True (--force) to store it anyway"
        )

    def _check_name(self, name: str) -> None:
        if name in self._code_jobs and not self._store.schedule_history(name):
            raise ConfigurationError(
                f"{name!r} is the name of a code-defined job: a stored schedule needs a "
                "name of its own"
            )

    def _check_at(self, schedule: Schedule) -> None:
        if schedule.at is None or not schedule.enabled:
            return
        if schedule.at <= self._now:
            raise ConfigurationError(
                f"at={schedule.at.isoformat()} is not in the future (the store's clock says "
                f"{self._now.isoformat()}): a change never fires a slot before it; to run now, "
                "use relay trigger"
            )


def operator() -> str:
    """Who makes a change when the caller does not say: ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def describe(schedule: Schedule) -> str:
    """When a stored schedule is due, as ``relay jobs`` and ``relay schedules list`` say it."""
    if schedule.cron is not None:
        return f"cron {schedule.cron!r} ({schedule.tz or 'UTC'})"
    if schedule.every is not None:
        return f"every {schedule.every:g}s"
    return f"once at {schedule.at.isoformat() if schedule.at else '?'}"


def _stored_spec(spec: str | None) -> bool:
    try:
        return bool(spec) and bool(json.loads(spec or "{}").get("stored"))
    except (ValueError, AttributeError):
        return False


def _text(schedule: Schedule) -> str:
    return _json(to_definition(schedule))


def _sized(schedule: Schedule) -> str:
    """The definition's text, refused above :data:`~relay.arguments.DEFINITION_MAX` bytes."""
    text = _text(schedule)
    if len(text.encode()) > check.DEFINITION_MAX:
        raise InvalidArgument(
            "args, kwargs, options and description",
            f"{len(text.encode())} bytes of definition",
            f"at most {check.DEFINITION_MAX} bytes of definition in all",
        )
    return text


def _check_by(by: object) -> None:
    if by is not None:
        check.text(by, "by", check.BY_MAX)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
