"""Schedules turn time into slots: the instants at which a job is due.

Slots depend on the schedule alone, never on when an instance ticks, so every instance computes the
same slots and therefore the same run ids. All slots are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from relay.cron import parse_cron
from relay.durations import Duration, seconds
from relay.errors import InvalidSchedule
from relay.runs import from_ms

__all__ = [
    "BoundedSchedule",
    "CronSchedule",
    "EverySchedule",
    "OnceSchedule",
    "Schedule",
    "make_schedule",
]

UTC = timezone.utc


class Schedule(Protocol):
    """When a job is due."""

    def latest_slot(self, at: datetime) -> datetime | None:
        """The last slot at or before ``at``, or ``None`` if there is none."""
        ...

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Slots ``s`` with ``after < s <= until``, oldest first."""
        ...

    def describe(self) -> str:
        """A short human description, such as ``every 60s`` or ``cron '*/5 * * * *' (UTC)``."""
        ...


class EverySchedule:
    """A slot every ``interval`` seconds, anchored to the Unix epoch (so all instances agree)."""

    __slots__ = ("_interval_ms", "interval")

    def __init__(self, interval: Duration) -> None:
        try:
            self.interval = seconds(interval, "every")
        except Exception as exc:
            raise InvalidSchedule(str(exc)) from None
        # Slots are kept in whole milliseconds so that run ids are exact strings everywhere.
        self._interval_ms = round(self.interval * 1000)
        if self._interval_ms < 1:
            raise InvalidSchedule(f"every={interval!r} is shorter than a millisecond")

    def latest_slot(self, at: datetime) -> datetime | None:
        at_ms = math.floor(at.timestamp() * 1000)
        return from_ms(at_ms - at_ms % self._interval_ms)

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        first = math.floor(after.timestamp() * 1000) // self._interval_ms + 1
        last = math.floor(until.timestamp() * 1000) // self._interval_ms
        for index in range(first, last + 1):
            yield from_ms(index * self._interval_ms)

    def describe(self) -> str:
        return f"every {self.interval:g}s"


class CronSchedule:
    """Slots from a five-field cron expression in a time zone (DST-correct, through croniter).

    The accepted dialect (five fields or an ``@`` nickname, no seconds, years or ``R``) is
    :mod:`relay.cron`'s. ``job`` is the name ``H`` hashes on, so every instance picks the same
    value; an expression using ``H`` needs it.
    """

    __slots__ = ("_parsed", "expression", "tz")

    def __init__(
        self, expression: str, tz: str | tzinfo | None = None, *, job: str | None = None
    ) -> None:
        self.expression = expression
        self.tz = _zone(tz)
        parsed = parse_cron(expression, job)
        try:
            # Parsing an expression costs croniter far more than stepping it: parse it once and
            # copy the parsed iterator for each use (a copy shares only what never changes).
            self._parsed = _parsed(parsed.fields, parsed.hash_id, self.tz)
            self._iter(datetime.now(self.tz)).get_next(datetime)
        except (CroniterBadCronError, CroniterBadDateError, ValueError) as exc:
            raise InvalidSchedule(
                f"cron expression {expression!r} is not valid: it never fires ({exc})"
            ) from None

    def _iter(self, start: datetime) -> croniter:
        iterator = copy.copy(self._parsed)
        iterator.set_current(start, force=True)
        return iterator

    def latest_slot(self, at: datetime) -> datetime | None:
        # croniter's get_prev is strict, so step from just after ``at`` to include ``at`` itself.
        start = at.astimezone(self.tz) + timedelta(microseconds=1)
        try:
            latest = _utc(self._iter(start).get_prev(datetime))
        except CroniterBadDateError:
            return None
        # get_prev steps back in wall time: in the hour a fall-back repeats it lands on that
        # hour's first pass, an hour early. Step forward to the last slot at or before ``at``.
        for slot in self.slots_between(latest, at):
            latest = slot
        return latest

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        iterator = self._iter(after.astimezone(self.tz))
        while True:
            slot = _utc(iterator.get_next(datetime))
            if slot > until:
                return
            yield slot

    def describe(self) -> str:
        return f"cron {self.expression!r} ({self.tz})"


class OnceSchedule:
    """One slot, at ``at`` (an aware datetime, kept in whole milliseconds like every slot)."""

    __slots__ = ("at",)

    def __init__(self, at: datetime) -> None:
        if not isinstance(at, datetime) or at.utcoffset() is None:
            raise InvalidSchedule(
                f"at={at!r} must be an aware datetime, such as datetime(2026, 12, 24, 18, 0, "
                "tzinfo=ZoneInfo('Europe/Paris')): a naive one means another time on each host"
            )
        self.at = from_ms(round(at.timestamp() * 1000))

    def latest_slot(self, at: datetime) -> datetime | None:
        return self.at if self.at <= at else None

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        if after < self.at <= until:
            yield self.at

    def describe(self) -> str:
        return f"once at {self.at.isoformat()}"


class BoundedSchedule:
    """The slots of ``inner`` after ``after`` (excluded) and up to ``until`` (included).

    A stored schedule's window: ``after`` is its last change (an edit never fires a slot that
    came before it) or its ``start``, ``until`` its ``end`` or its ``max_runs``-th slot.
    """

    __slots__ = ("after", "inner", "until")

    def __init__(self, inner: Schedule, after: datetime, until: datetime | None) -> None:
        self.inner = inner
        self.after = after
        self.until = until

    def latest_slot(self, at: datetime) -> datetime | None:
        if self.until is not None and at > self.until:
            at = self.until
        slot = self.inner.latest_slot(at)
        return slot if slot is not None and slot > self.after else None

    def slots_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        after = max(after, self.after)
        if self.until is not None:
            until = min(until, self.until)
        if after < until:
            yield from self.inner.slots_between(after, until)

    def describe(self) -> str:
        return self.inner.describe()


def make_schedule(
    *,
    cron: str | None,
    every: Duration | None,
    tz: str | tzinfo | None,
    job: str | None = None,
) -> Schedule:
    """Build the schedule a job asked for; exactly one of ``cron`` and ``every`` must be given.

    ``job`` is the job's name, which ``H`` in a cron expression hashes on. Jobs asking for the
    same schedule share one (a schedule never changes once built): 100,000 jobs with a few
    schedules keep a few, not 100,000. A cron expression using ``H`` is each job's own.
    """
    if cron is not None and every is not None:
        raise InvalidSchedule("give cron= or every=, not both")
    if cron is not None:
        zone = _zone(tz)
        hashed = parse_cron(cron, job).hash_id is not None
        return _shared_cron(cron, zone, job if hashed else None)
    if every is not None:
        if tz is not None:
            raise InvalidSchedule("tz= only applies to cron=; every= slots are epoch-anchored")
        # Checked (and converted to seconds) first: every=60 and every=timedelta(minutes=1) share.
        return _shared_every(EverySchedule(every).interval)
    raise InvalidSchedule("a job needs a schedule: cron='*/5 * * * *' or every=60 (seconds)")


@functools.lru_cache(maxsize=4096)
def _shared_cron(expression: str, tz: tzinfo, job: str | None) -> CronSchedule:
    """The schedule of every job with this expression and zone (``job``: only for ``H``)."""
    return CronSchedule(expression, tz, job=job)


@functools.lru_cache(maxsize=4096)
def _shared_every(interval: float) -> EverySchedule:
    """The schedule of every job with this interval (seconds)."""
    return EverySchedule(interval)


@functools.lru_cache(maxsize=4096)  # jobs sharing an expression share its parsed form
def _parsed(fields: str, hash_id: bytes | None, tz: tzinfo) -> croniter:
    """A parsed croniter to copy from (never stepped itself)."""
    return croniter(fields, datetime.now(tz), hash_id=hash_id)


def _zone(tz: str | tzinfo | None) -> tzinfo:
    if tz is None:
        return UTC
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise InvalidSchedule(
            f"tz={tz!r} is not a time zone: use an IANA name such as 'Europe/Paris' or a tzinfo"
        )
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Paris'"
        ) from None


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)
