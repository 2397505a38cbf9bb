"""Stored schedules: periodic tasks kept in a lease store, changed at runtime, versioned.

A :class:`Schedule` names a task that a host allows (``@scheduler.task("name")``), when it is due
(``cron``/``tz``, ``every`` or one ``at``), its arguments and the options a code-defined job has.
Each change makes a new ``version`` and one :class:`ScheduleChange` in its history, in the same
atomic step on the store. :func:`check_schedule` validates a definition with the rules of
code-defined jobs (:func:`relay.jobs.make_job`), and :func:`schedule_job` turns a stored schedule
into the :class:`~relay.jobs.Job` an instance decides, bounded so that a change never fires a slot
that came before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone, tzinfo
from itertools import islice
from typing import Any, Literal

from relay.arguments import NAME_MAX
from relay.contract import ClaimBackend, LeaseBackend
from relay.durations import Duration
from relay.errors import ConfigurationError, InvalidSchedule
from relay.jobs import DEFAULT_MAX_ATTEMPTS, Job, Overlap, make_job
from relay.runs import from_ms, slot_ms
from relay.schedules import BoundedSchedule, EverySchedule, OnceSchedule, make_schedule
from relay.schedules import Schedule as Slots

__all__ = [
    "DEFINITION",
    "MAX_RUNS_LIMIT",
    "Schedule",
    "ScheduleChange",
    "StoredRow",
    "changes_between",
    "check_schedule",
    "from_row",
    "recheck",
    "row_at",
    "schedule_job",
    "to_definition",
]

UTC = timezone.utc
MAX_RUNS_LIMIT = 100_000
"""The largest ``max_runs``: beyond it, end the schedule with ``end=`` instead."""
_MS = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule as the store holds it: its definition and its latest version.

    Exactly one of ``cron`` (with ``tz``), ``every`` (seconds) and ``at`` (one run) is set.
    ``version`` grows by one with each change; ``updated_at`` (the store's clock) and
    ``updated_by`` say when and by whom the last change was made.
    """

    name: str
    task: str
    cron: str | None = None
    every: float | None = None
    at: datetime | None = None
    tz: str | None = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    enabled: bool = True
    start: datetime | None = None
    end: datetime | None = None
    max_runs: int | None = None
    overlap: Overlap = "allow"
    catch_up: float = 0.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    stale_after: float | None = None
    jitter: float = 0.0
    options: Mapping[str, Any] = field(default_factory=dict)
    """The host's own publish options (Celery's ``queue``, ``priority``…); kept as given."""
    description: str = ""
    expect_success_within: float | Literal[False] | None = None
    """By when after its slot a run should have succeeded (:mod:`relay.expectations`)."""
    alert_after_failures: int | None = None
    """Slots in a row failed, missed or stale that make the job failing."""
    version: int = 0
    updated_at: datetime | None = None
    updated_by: str | None = None
    created_at: datetime | None = None
    """When its first version was stored (``max_runs`` counts slots from it, or from ``start``)."""


DEFINITION = tuple(
    f.name
    for f in fields(Schedule)
    if f.name not in ("name", "version", "updated_at", "updated_by", "created_at")
)
"""The fields a change may set: every field but the name and the store's own."""
_TIMES = ("at", "start", "end")
_LATER = ("expect_success_within", "alert_after_failures")
"""Fields added after stored schedules shipped: written only when set."""


@dataclass(frozen=True)
class ScheduleChange:
    """One change of a stored schedule, as its history keeps it."""

    name: str
    version: int
    """The version the change made."""
    at: datetime
    """When it was made, on the store's clock."""
    by: str
    """Who made it (``user@host`` unless the caller said)."""
    action: str
    """``add``, ``update`` or ``remove``."""
    changes: Mapping[str, Any]
    """What changed: each field's ``[before, after]``, as JSON values."""


@dataclass(frozen=True)
class StoredRow:
    """What a store keeps of one schedule: its definition as JSON text and its version."""

    name: str
    definition: str | None
    """``None`` once removed: the row stays so that instances learn of the removal."""
    version: int
    revision: int
    """The store-wide revision of its last change (see ``ScheduleStore.schedule_changes``)."""
    updated_at: datetime
    updated_by: str
    created_at: datetime


def to_definition(schedule: Schedule) -> dict[str, Any]:
    """The definition fields of ``schedule`` as JSON values (times as ISO strings in UTC)."""
    values: dict[str, Any] = {}
    for name in DEFINITION:
        value = getattr(schedule, name)
        if value is None and name in _LATER:
            continue  # a definition without them stays the text it always was
        if isinstance(value, datetime):
            value = value.astimezone(UTC).isoformat()
        elif name == "args":
            value = list(value)
        elif name in ("kwargs", "options"):
            value = dict(value)
        values[name] = value
    return values


def from_row(row: StoredRow) -> Schedule:
    """The schedule a store row holds (a removed row has no definition: refused)."""
    if row.definition is None:
        raise ConfigurationError(f"schedule {row.name!r} was removed (version {row.version})")
    values = json.loads(row.definition)
    for name in _TIMES:
        if values.get(name) is not None:
            values[name] = datetime.fromisoformat(values[name])
    values["args"] = tuple(values.get("args") or ())
    known = {k: v for k, v in values.items() if k in DEFINITION}  # a newer Relay's extra fields
    return Schedule(
        name=row.name, version=row.version, updated_at=row.updated_at,
        updated_by=row.updated_by, created_at=row.created_at, **known,
    )  # fmt: skip


def row_at(history: Sequence[ScheduleChange], version: int) -> StoredRow | None:
    """The row of a schedule as it was at ``version``, rebuilt from its ``history`` (oldest
    first); ``None`` if the history has no such version, or the schedule was removed at it.

    Each change keeps what it changed as ``[before, after]``; an add keeps every field it set.
    """
    definition: dict[str, Any] = {}
    found = created = None
    for change in history:
        if change.version > version:
            break
        if change.action == "remove":
            definition = {}
            continue
        if change.action == "add":  # the first, or an add after a remove: created anew
            created = change.at
        for name, (_, after) in change.changes.items():
            definition[name] = after
        found = change if change.version == version else None
    if found is None or created is None:
        return None
    text = json.dumps({k: v for k, v in definition.items() if v is not None})
    return StoredRow(
        name=found.name, definition=text, version=version, revision=0, updated_at=found.at,
        updated_by=found.by, created_at=created,
    )  # fmt: skip


def changes_between(before: Schedule | None, after: Schedule | None) -> dict[str, Any]:
    """Each definition field that differs, as ``[before, after]`` JSON values."""
    old = to_definition(before) if before is not None else {}
    new = to_definition(after) if after is not None else {}
    return {
        name: [old.get(name), new.get(name)]
        for name in DEFINITION
        if old.get(name) != new.get(name)
    }


def check_schedule(
    backend: ClaimBackend | LeaseBackend,
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
    expect_success_within: Duration | Literal[False] | None = None,
    alert_after_failures: int | None = None,
) -> Schedule:
    """Validate a definition with the rules of code-defined jobs; return it normalised.

    Durations become seconds, ``tz`` its IANA name, times UTC: a definition given twice in two
    spellings is stored the same, so applying a file again changes nothing. Raises
    :class:`~relay.errors.ConfigurationError` naming the fix.
    """
    _check_text(task, "task")
    if at is not None and (cron is not None or every is not None or tz is not None):
        raise InvalidSchedule("give at= alone: a one-off run has no cron=, every= or tz=")
    slots: Slots | None = None if at is None else OnceSchedule(at)
    job = make_job(
        backend, name=name, cron=cron, every=every, tz=tz, overlap=overlap,
        max_attempts=max_attempts, catch_up=catch_up, stale_after=stale_after, jitter=jitter,
        schedule=slots, expect_success_within=expect_success_within,
        alert_after_failures=alert_after_failures,
    )  # fmt: skip
    begin, finish = _aware(start, "start"), _aware(end, "end")
    if begin is not None and finish is not None and finish <= begin:
        raise ConfigurationError(f"end={end!r} is not after start={start!r}: swap them")
    if max_runs is not None and (
        isinstance(max_runs, bool) or not isinstance(max_runs, int)
        or not 1 <= max_runs <= MAX_RUNS_LIMIT
    ):  # fmt: skip
        raise ConfigurationError(
            f"max_runs={max_runs!r} must be a whole number from 1 to {MAX_RUNS_LIMIT} "
            "(or None): to stop a schedule at a date, give end="
        )
    if not isinstance(enabled, bool):
        raise ConfigurationError(f"enabled={enabled!r} must be True or False")
    if not isinstance(description, str):
        raise ConfigurationError(f"description={description!r} must be a string")
    return Schedule(
        name=name, task=task, cron=cron, every=_interval(job), at=_at(job), tz=_tz_name(cron, tz),
        args=_json_args(args), kwargs=_json_mapping(kwargs, "kwargs"), enabled=enabled,
        start=begin, end=finish, max_runs=max_runs, overlap=job.overlap, catch_up=job.catch_up,
        max_attempts=job.max_attempts, stale_after=job.stale_after, jitter=job.jitter,
        options=_json_mapping(options, "options"), description=description,
        expect_success_within=job.expect_success_within,
        alert_after_failures=job.alert_after_failures,
    )  # fmt: skip


def recheck(backend: ClaimBackend | LeaseBackend, schedule: Schedule) -> Schedule:
    """:func:`check_schedule` of a schedule's definition (after a change to some of its fields)."""
    values = {name: getattr(schedule, name) for name in DEFINITION}
    checked = check_schedule(backend, schedule.name, **values)
    return replace(
        checked, version=schedule.version, updated_at=schedule.updated_at,
        updated_by=schedule.updated_by, created_at=schedule.created_at,
    )  # fmt: skip


def schedule_job(
    backend: ClaimBackend | LeaseBackend,
    schedule: Schedule,
    handler: Callable[..., Any] | None,
) -> Job:
    """The job an instance decides for ``schedule``: its slots after its last change only.

    A change takes effect from the first slot after it (``updated_at``, on the store's clock): it
    never fires a run at once, and the slots before it are neither run nor caught up because of
    it. ``start``, ``end`` and ``max_runs`` (counted from ``start``, else from its creation)
    bound the slots too.
    """
    changed = schedule.updated_at or datetime.now(UTC)
    inner: Slots = (
        OnceSchedule(schedule.at)
        if schedule.at is not None
        else make_schedule(
            cron=schedule.cron, every=schedule.every, tz=schedule.tz, job=schedule.name
        )
    )
    after = changed if schedule.start is None else max(changed, schedule.start - _MS)
    until = schedule.end
    if schedule.max_runs is not None:
        anchor = (schedule.start - _MS) if schedule.start else (schedule.created_at or changed)
        last = _nth_slot(inner, anchor, schedule.max_runs)
        if last is not None:
            until = last if until is None else min(until, last)
    return make_job(
        backend, name=schedule.name, handler=handler, overlap=schedule.overlap,
        max_attempts=schedule.max_attempts, catch_up=schedule.catch_up or None,
        stale_after=schedule.stale_after, jitter=schedule.jitter or None,
        schedule=BoundedSchedule(inner, after, until),
        expect_success_within=schedule.expect_success_within,
        alert_after_failures=schedule.alert_after_failures,
    )  # fmt: skip


def _nth_slot(inner: Slots, after: datetime, n: int) -> datetime | None:
    """The ``n``-th slot of ``inner`` after ``after`` (None if it has fewer within 100 years)."""
    if isinstance(inner, EverySchedule):  # no need to step through them
        step = timedelta(seconds=inner.interval)
        first = next(iter(inner.slots_between(after, after + step)))
        return from_ms(slot_ms(first) + (n - 1) * round(inner.interval * 1000))
    horizon = after + timedelta(days=36525)
    found = list(islice(inner.slots_between(after, horizon), n))
    return found[-1] if len(found) == n else None


def _check_text(value: object, what: str) -> None:
    if not isinstance(value, str) or not value or not value.isprintable() or "@" in value:
        raise ConfigurationError(
            f"{what} {value!r} must be a non-empty string without '@' or control characters"
        )
    if len(value) > NAME_MAX:
        raise ConfigurationError(
            f"{what} {value[:40]!r}… is {len(value)} characters: at most {NAME_MAX}"
        )


def _aware(value: object, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ConfigurationError(
            f"{what}={value!r} must be an aware datetime, such as "
            "datetime(2026, 12, 1, tzinfo=timezone.utc): a naive one is another time on each host"
        )
    return value.astimezone(UTC)


def _interval(job: Job) -> float | None:
    return job.schedule.interval if isinstance(job.schedule, EverySchedule) else None


def _at(job: Job) -> datetime | None:
    return job.schedule.at if isinstance(job.schedule, OnceSchedule) else None


def _tz_name(cron: str | None, tz: str | tzinfo | None) -> str | None:
    if cron is None or tz is None:
        return None
    if isinstance(tz, str):
        return tz
    key = getattr(tz, "key", None)  # a ZoneInfo knows its IANA name
    if isinstance(key, str):
        return key
    if tz is UTC:
        return "UTC"
    raise InvalidSchedule(
        f"tz={tz!r} has no IANA name to store: give the name, such as 'Europe/Paris'"
    )


def _json_args(value: object) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise ConfigurationError(f"args={value!r} must be a list or tuple of JSON values")
    _json(list(value), "args")
    return tuple(json.loads(json.dumps(list(value))))


def _json_mapping(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"{what}={value!r} must be a dict with string keys")
    _json(dict(value), what)
    loaded: dict[str, Any] = json.loads(json.dumps(dict(value)))
    return loaded


def _json(value: object, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{what} must hold JSON values only (strings, numbers, booleans, None, lists, "
            f"dicts), as the store keeps them: {exc}"
        ) from None
