"""A django-celery-beat crontab becomes the cron expression that fires on the same minutes."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from celery.schedules import crontab
from croniter import croniter

from relay.contrib.django.celery_beat import Unmappable, cron_of
from relay.cron import parse_cron

SPECS = [
    # minute, hour, day_of_month, month_of_year, day_of_week; the cron expected
    (("*", "*", "*", "*", "*"), "* * * * *"),
    (("*/15", "9-17", "*", "*", "mon-fri"), "*/15 9-17 * * 1-5"),
    (("5,20,35,50", "*/6", "*", "*", "*"), "5-50/15 */6 * * *"),
    (("0", "3", "1,15", "*/3", "*"), "0 3 1,15 */3 *"),
    (("30", "0-5,22", "*", "12", "sun,sat"), "30 0-5,22 * 12 0,6"),
    (("0", "12", "2-30/7", "*", "*"), "0 12 2-30/7 * *"),
]


def beat_crontab(fields: tuple[str, ...]) -> SimpleNamespace:
    names = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    return SimpleNamespace(**dict(zip(names, fields, strict=True)))


@pytest.mark.parametrize(("fields", "expected"), SPECS)
def test_the_cron_fires_on_the_minutes_celery_does(fields: tuple[str, ...], expected: str) -> None:
    cron = cron_of(beat_crontab(fields))
    assert cron == expected
    parse_cron(cron)  # Relay accepts it
    minute, hour, day, month, weekday = fields
    celery = crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month,
                     day_of_week=weekday)  # fmt: skip
    sets = [getattr(celery, n) for n in ("minute", "hour", "day_of_month", "month_of_year")]
    at = datetime(2026, 1, 1)
    while at < datetime(2027, 1, 1):  # steps of 97 minutes: every minute of the hour, each month
        # Celery's rule: every field matches (the day of the month and of the week both).
        fires = (
            at.minute in sets[0] and at.hour in sets[1] and at.day in sets[2]
            and at.month in sets[3] and at.isoweekday() % 7 in celery.day_of_week
        )  # fmt: skip
        assert croniter.match(cron, at) == fires, at
        at += timedelta(minutes=97)


def test_a_crontab_cron_cannot_say_is_refused_with_the_reason() -> None:
    with pytest.raises(Unmappable, match="Celery runs on days that match both"):
        cron_of(beat_crontab(("0", "9", "1-7", "*", "mon")))
    with pytest.raises(Unmappable, match="is not valid"):
        cron_of(beat_crontab(("61", "*", "*", "*", "*")))
    with pytest.raises(Unmappable, match="is not valid"):  # Celery's weekdays end at 6 (Saturday)
        cron_of(beat_crontab(("0", "12", "*", "*", "7")))
