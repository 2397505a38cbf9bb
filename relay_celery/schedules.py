"""Turn a ``beat_schedule`` entry's schedule into Relay's, whose slots every beat agrees on.

Celery's own schedules count from each beat's ``last_run_at``, so two beats would name different
runs; Relay's schedules derive slots from the clock alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta, tzinfo
from typing import Any

from celery.schedules import crontab, schedule

from relay.errors import ConfigurationError

__all__ = ["crontab_expression", "schedule_options"]

# (attribute, every value it can take): a field holding every value is written "*".
_FIELDS = (
    ("minute", range(60)),
    ("hour", range(24)),
    ("day_of_month", range(1, 32)),
    ("month_of_year", range(1, 13)),
    ("day_of_week", range(7)),
)


def schedule_options(entry_name: str, value: object, tz: tzinfo) -> dict[str, Any]:
    """:func:`relay.jobs.make_job` options for a Celery ``crontab`` (in ``tz``) or ``schedule``.

    Anything else (``solar``, a custom schedule class) raises :class:`ConfigurationError` naming
    the entry: its slots cannot be derived the same way on every beat.
    """
    if isinstance(value, crontab):
        return {"cron": crontab_expression(entry_name, value), "tz": tz}
    if type(value) is schedule:
        every: timedelta = value.run_every  # type: ignore[attr-defined]  # not in celery-types
        return {"every": every}
    raise ConfigurationError(
        f"beat_schedule entry {entry_name!r} uses a {type(value).__name__} schedule, which "
        "RelayScheduler cannot turn into slots every beat agrees on; use a crontab, a timedelta "
        "or a number of seconds"
    )


def crontab_expression(entry_name: str, value: crontab) -> str:
    """The five-field cron expression equal to a Celery ``crontab``."""
    fields = {name: _field(getattr(value, name), full) for name, full in _FIELDS}
    if fields["day_of_month"] != "*" and fields["day_of_week"] != "*":
        # Celery requires both to match; cron runs when either does. Refuse rather than differ.
        raise ConfigurationError(
            f"beat_schedule entry {entry_name!r} restricts both day_of_month and day_of_week, "
            "which Celery and cron read differently; split it into two entries"
        )
    return " ".join(fields[name] for name, _ in _FIELDS)


def _field(values: Iterable[int], full: range) -> str:
    chosen = sorted(set(values))
    return "*" if chosen == list(full) else ",".join(str(v) for v in chosen)
