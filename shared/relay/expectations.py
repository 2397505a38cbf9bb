"""Expectations: by when each slot of a job should have succeeded, and after how many failures
the job is failing.

``expect_success_within`` (seconds or a timedelta) counts from a slot's time: a slot that has not
succeeded by then makes the job **overdue**. Left out (``None``), it is derived from the schedule:
the time to the job's next slot, plus a grace of a tenth of it (at least :data:`MIN_GRACE`), plus
the job's ``jitter``. A daily job at 02:00 is then overdue at 04:24 the next day when no run
succeeded since: one failed night is forgiven if the next one succeeds. ``False`` opts out: the
job is never overdue.

``alert_after_failures=N`` makes the job **failing** once its N latest slots in a row ended
failed, missed or stale. Left out, a job is never failing (a failed slot still makes it overdue
once its expectation passes).

Both need a store that keeps outcomes: on a claim backend they raise
:class:`~relay.errors.UnsupportedOption`.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from datetime import datetime, timedelta
from typing import Literal, cast

from relay.durations import Duration, seconds
from relay.errors import ConfigurationError
from relay.schedules import Schedule

__all__ = [
    "FALLBACK_INTERVAL",
    "GRACE_FRACTION",
    "MIN_GRACE",
    "Within",
    "check_alert_after_failures",
    "check_expect_success_within",
    "expected_by",
    "next_slot",
]

Within = float | Literal[False] | None
"""A job's ``expect_success_within``: seconds, ``None`` (derived from the schedule) or ``False``
(never overdue)."""

GRACE_FRACTION = 0.1
"""The derived expectation's grace: this share of the time to the next slot..."""
MIN_GRACE = 60.0
"""...but at least this many seconds."""
FALLBACK_INTERVAL = 24 * 3600.0
"""Seconds the derived expectation takes as the interval when the schedule has no next slot."""
_HORIZON = timedelta(days=400)


def check_expect_success_within(value: Duration | Literal[False] | None) -> Within:
    """``value`` as seconds (``None`` and ``False`` as they are); refused unless above 0."""
    if value is None or value is False:
        return value
    if value is True:
        raise ConfigurationError(
            "expect_success_within=True is not a duration: give seconds or a timedelta, leave "
            "it out for the default derived from the schedule, or pass False to opt out"
        )
    if isinstance(value, int | float | timedelta) and not _seconds_of(value) > 0:
        raise ConfigurationError(
            f"expect_success_within={value!r} must be longer than 0 s: how long after its slot "
            "a run should have succeeded; pass False to opt out instead"
        )
    return seconds(value, "expect_success_within")


def _seconds_of(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def check_alert_after_failures(value: object) -> int | None:
    """``value`` as a whole number of slots >= 1, or ``None`` (never failing)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"alert_after_failures={value!r} must be a whole number >= 1 (slots in a row that "
            "ended failed, missed or stale), or None to never mark the job failing"
        )
    return value


def next_slot(schedule: Schedule, slot: datetime) -> datetime | None:
    """The schedule's first slot after ``slot``, within 400 days.

    Cached: jobs share their schedules (:func:`relay.schedules.make_schedule`), and many jobs of
    one schedule ask for the same slots (a cron step costs croniter a fraction of a millisecond).
    """
    return _next_slot(cast(Hashable, schedule), slot)


@functools.lru_cache(maxsize=4096)
def _next_slot(schedule: Hashable, slot: datetime) -> datetime | None:
    return next(iter(cast(Schedule, schedule).slots_between(slot, slot + _HORIZON)), None)


def expected_by(
    schedule: Schedule, slot: datetime, within: Within, jitter: float = 0.0
) -> datetime | None:
    """When the run of ``slot`` should have succeeded; ``None`` if the job opted out."""
    if within is False:
        return None
    if within is not None:
        return slot + timedelta(seconds=within)
    following = next_slot(schedule, slot)
    interval = FALLBACK_INTERVAL if following is None else (following - slot).total_seconds()
    grace = max(MIN_GRACE, interval * GRACE_FRACTION)
    return slot + timedelta(seconds=interval + grace + jitter)
