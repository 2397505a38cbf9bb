"""django-celery-beat's periodic tasks as Relay stored schedules (``manage.py
relay_import_celery_beat``).

:func:`definition` maps one ``PeriodicTask`` row to the options of
:meth:`relay.Control.add_schedule`, or raises :class:`Unmappable` saying why Relay cannot express
it. :func:`plan` checks every row against the store (with the rules of code-defined jobs, as any
stored schedule) and says what importing it would do; :func:`apply` does it. A row already
imported with the same definition is left alone, so importing again changes no version.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from relay.control import Control
from relay.control_schedules import describe
from relay.errors import ConfigurationError, Conflict
from relay.stored import DEFINITION, Schedule, changes_between, check_schedule

__all__ = ["PERIODS", "Outcome", "Unmappable", "apply", "cron_of", "definition", "plan", "rows"]

PERIODS = ("days", "hours", "minutes", "seconds", "microseconds")
"""django-celery-beat's interval periods (each a ``timedelta`` keyword)."""
_KINDS = ("interval", "crontab", "solar", "clocked")
_OPTIONS = ("queue", "exchange", "routing_key", "priority")
"""The row's columns that are Celery publish options as they are."""
Action = Literal["add", "update", "unchanged", "skip"]
_VERBS: dict[Action, tuple[str, str]] = {
    "add": ("would add", "added"),
    "update": ("would update", "updated"),
    "unchanged": ("unchanged", "unchanged"),
    "skip": ("not imported", "not imported"),
}
"""How the output says each action: in a dry run, and done."""


class Unmappable(ConfigurationError):
    """A periodic task Relay cannot express as it stands; the message says why and what to do."""


@dataclass(frozen=True)
class Outcome:
    """What importing one periodic task does (or did): ``add``, ``update``, ``unchanged`` or
    ``skip`` (not imported, ``reason`` says why)."""

    name: str
    action: Action
    reason: str = ""
    schedule: Schedule | None = None
    """The stored schedule it maps to (None when the row cannot be mapped)."""
    changes: Mapping[str, Any] = field(default_factory=dict)
    """For ``update``: what changes, each field's ``[before, after]``."""
    version: int = 0
    """For ``update``: the version the changes were read against (a later change conflicts)."""

    def line(self, dry_run: bool) -> str:
        """One line of the command's output."""
        word = _VERBS[self.action][0 if dry_run else 1]
        if self.action == "skip":
            return f"{word}: {self.name}: {self.reason}"
        if self.action == "update":
            return f"{word}: {self.name}: {', '.join(sorted(self.changes))}"
        assert self.schedule is not None
        return f"{word}: {self.name} (task {self.schedule.task}, {describe(self.schedule)})"


def rows() -> list[Any]:
    """Every ``PeriodicTask`` row, by name, with its schedule rows (django-celery-beat's models)."""
    from django.apps import apps

    if not apps.is_installed("django_celery_beat"):
        raise ConfigurationError(
            "django_celery_beat is not in INSTALLED_APPS: add it (pip install django-celery-beat) "
            "so that its tables can be read"
        )
    from django_celery_beat.models import PeriodicTask

    query = PeriodicTask.objects.select_related(*_KINDS).order_by("name")
    return list(query)


def definition(task: Any) -> dict[str, Any]:
    """The options of :meth:`relay.Control.add_schedule` (``name`` and ``task`` too) that one
    ``PeriodicTask`` row means; :class:`Unmappable` if Relay cannot express it."""
    ran = bool(task.one_off and task.total_run_count)
    values: dict[str, Any] = {
        "name": task.name,
        "task": task.task,
        **_when(task),
        "args": _loads(task.args, "args", list, "[]"),
        "kwargs": _loads(task.kwargs, "kwargs", dict, "{}"),
        # A one-off task that ran is disabled by django-celery-beat at its next check.
        "enabled": bool(task.enabled) and not ran,
        "start": _aware(task.start_time),
        "end": _aware(task.expires),
        "options": _options(task),
        "description": task.description or "",
    }
    if task.one_off and task.clocked_id is None:
        values["max_runs"] = 1
    return values


def cron_of(crontab: Any) -> str:
    """The five-field cron expression a ``CrontabSchedule`` means (read by Celery's own parser,
    so each field is the set of values Celery runs on); :class:`Unmappable` if cron cannot say it.
    """
    from celery.schedules import ParseException
    from celery.schedules import crontab as celery_crontab

    spec = " ".join(
        str(getattr(crontab, name))
        for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    )
    try:
        # Any: celery-types does not declare the parsed sets (minute, hour...).
        parsed: Any = celery_crontab(
            minute=crontab.minute, hour=crontab.hour, day_of_week=crontab.day_of_week,
            day_of_month=crontab.day_of_month, month_of_year=crontab.month_of_year,
        )  # fmt: skip
    except (ValueError, ParseException) as exc:
        raise Unmappable(
            f"its crontab {spec!r} is not valid ({exc}): fix it in the admin"
        ) from None
    day, weekday = _field(parsed.day_of_month, 1, 31), _field(parsed.day_of_week, 0, 6)
    if day != "*" and weekday != "*":
        raise Unmappable(
            f"its crontab {spec!r} restricts both the day of the month and the day of the week: "
            "Celery runs on days that match both, cron on days that match either. Split it into "
            "one schedule per day of the month, or check the weekday in the task"
        )
    minute, hour = _field(parsed.minute, 0, 59), _field(parsed.hour, 0, 23)
    return f"{minute} {hour} {day} {_field(parsed.month_of_year, 1, 12)} {weekday}"


def plan(
    control: Control, tasks: Iterable[Any], *, force: bool = False, update: bool = False
) -> list[Outcome]:
    """What importing each row would do, checked against the store; reads only.

    A row is skipped, with the reason, when Relay cannot express it, when its definition fails
    the checks of stored schedules, when a stored schedule of its name holds another definition
    (unless ``update``) or a code-defined job has its name, when no live instance allows its
    task (unless ``force``) or when its one run is already past.
    """
    current = {s.name: s for s in control.schedules()}  # refuses a claim backend first
    allowed = {t for tasks in control.allowed_tasks().values() for t in tasks}
    # Instances register stored schedules as jobs too (their spec says so), removed ones as well.
    code_jobs = {s.name for s in control.jobs() if not s.spec.get("stored")} - set(current)
    now = datetime.now(timezone.utc)
    outcomes = []
    for task in tasks:
        try:
            values = definition(task)
            schedule = check_schedule(control.backend, **values)
        except ConfigurationError as exc:
            outcomes.append(Outcome(task.name, "skip", str(exc)))
            continue
        before = current.get(schedule.name)
        reason = _refusal(schedule, before, code_jobs, allowed if not force else None, now)
        if reason:
            outcomes.append(Outcome(schedule.name, "skip", reason, schedule))
        elif before is None:
            outcomes.append(Outcome(schedule.name, "add", schedule=schedule))
        elif diff := changes_between(before, schedule):
            if update:
                outcomes.append(
                    Outcome(schedule.name, "update", "", schedule, diff, before.version)
                )
            else:
                outcomes.append(Outcome(schedule.name, "skip", _clash(before, diff), schedule))
        else:
            outcomes.append(Outcome(schedule.name, "unchanged", schedule=schedule))
    return outcomes


def apply(
    control: Control, outcomes: Iterable[Outcome], *, by: str | None = None, force: bool = False
) -> list[Outcome]:
    """Make the additions and updates ``outcomes`` list; each one the store refuses (a change
    made meanwhile, say) becomes a ``skip`` naming why. Returns the outcomes as they ended."""
    done = []
    for outcome in outcomes:
        schedule = outcome.schedule
        try:
            if outcome.action == "add" and schedule is not None:
                control.add_schedule(schedule.name, **_values(schedule), by=by, force=force)
            elif outcome.action == "update" and schedule is not None:
                control.update_schedule(
                    schedule.name, version=outcome.version, by=by, force=force, **_values(schedule)
                )
        except (ConfigurationError, Conflict) as exc:
            outcome = Outcome(outcome.name, "skip", str(exc), schedule)
        done.append(outcome)
    return done


def _when(task: Any) -> dict[str, Any]:
    kinds = [kind for kind in _KINDS if getattr(task, f"{kind}_id") is not None]
    if not kinds:
        raise Unmappable("it has no schedule (none of interval, crontab, solar, clocked)")
    if len(kinds) > 1:
        raise Unmappable(f"it has both {' and '.join(kinds)}: give it one schedule in the admin")
    kind = kinds[0]
    if kind == "solar":
        raise Unmappable(
            f"solar schedules ({task.solar}) have no equivalent in Relay: give it a cron at the "
            "hour you want, in the place's time zone"
        )
    if kind == "clocked":
        return {"at": _aware(task.clocked.clocked_time)}
    if kind == "interval":
        return {"every": _every(task.interval)}
    return {"cron": cron_of(task.crontab), "tz": str(task.crontab.timezone)}


def _every(interval: Any) -> timedelta:
    if interval.period not in PERIODS or interval.every <= 0:
        raise Unmappable(
            f"its interval (every {interval.every} {interval.period}) is not a positive number "
            f"of {', '.join(PERIODS)}"
        )
    return timedelta(**{interval.period: interval.every})


def _aware(value: datetime | None) -> Any:
    """A time from the database; naive ones (``USE_TZ = False``) are in ``TIME_ZONE``, as Django
    and django-celery-beat read them."""
    if value is None or value.utcoffset() is not None:
        return value
    from django.utils import timezone as django_timezone

    return django_timezone.make_aware(value, django_timezone.get_default_timezone())


def _field(values: Iterable[int], low: int, high: int) -> str:
    """A set of values as a cron field: ``*`` for all of them, ``*/step`` or ``a-b/step`` for a
    stepped range, else runs and single values."""
    found = sorted(set(values))
    if found == list(range(low, high + 1)):
        return "*"
    step = found[1] - found[0] if len(found) > 2 else 0
    if step > 1 and found == list(range(found[0], found[-1] + 1, step)):
        whole = found[0] == low and found[-1] + step > high
        return f"*/{step}" if whole else f"{found[0]}-{found[-1]}/{step}"
    parts, start = [], 0
    for index, value in enumerate(found):
        if index + 1 == len(found) or found[index + 1] != value + 1:
            first = found[start]
            parts.append(str(first) if first == value else f"{first}-{value}")
            start = index + 1
    return ",".join(parts)


def _loads(text: str | None, what: str, kind: type, empty: str) -> Any:
    try:
        value = json.loads(text or empty)
    except ValueError as exc:
        raise Unmappable(
            f"its {what} {text!r} are not JSON ({exc}): fix them in the admin"
        ) from None
    if not isinstance(value, kind):
        shape = "a JSON list" if kind is list else "a JSON object"
        raise Unmappable(f"its {what} {text!r} are not {shape}: fix them in the admin")
    return value


def _options(task: Any) -> dict[str, Any]:
    """The Celery publish options django-celery-beat sends the task with."""
    options = {
        name: getattr(task, name) for name in _OPTIONS if getattr(task, name) not in ("", None)
    }
    headers = _loads(task.headers, "headers", dict, "{}")
    if headers:
        options["headers"] = headers
    # As django-celery-beat's expires_: the date first, else the seconds (it refuses both).
    if task.expires is not None:
        options["expires"] = _aware(task.expires).isoformat()
    elif task.expire_seconds:
        options["expires"] = task.expire_seconds
    return options


def _refusal(
    schedule: Schedule,
    before: Schedule | None,
    code_jobs: set[str],
    allowed: set[str] | None,
    now: datetime,
) -> str:
    """Why the store would refuse this schedule ('' if it would not)."""
    if schedule.name in code_jobs:
        return "a code-defined job has this name: rename the periodic task in the admin"
    if before is None and schedule.at is not None and schedule.enabled and schedule.at <= now:
        return (
            f"its clocked time {schedule.at.isoformat()} has passed: Relay never runs a slot "
            "before the schedule was stored (run it now with relay trigger, if it still should)"
        )
    task_is_new = before is None or before.task != schedule.task
    if allowed is not None and task_is_new and schedule.task not in allowed:
        # The rows are django-celery-beat's: their tasks run on Celery, allowed on Celery beat.
        return (
            f"no live instance allows task {schedule.task!r}: allow it on Celery beat with "
            f"@relay_celery.schedulable above the task, or RELAY['SCHEDULABLE_TASKS'] = "
            f"[{schedule.task!r}] in settings, and start beat; or pass --force"
        )
    return ""


def _clash(before: Schedule, diff: Mapping[str, Any]) -> str:
    return (
        f"a stored schedule of this name holds another definition (version {before.version}, "
        f"by {before.updated_by}; differs in {', '.join(sorted(diff))}): pass --update to "
        "replace it"
    )


def _values(schedule: Schedule) -> dict[str, Any]:
    return {name: getattr(schedule, name) for name in DEFINITION}
