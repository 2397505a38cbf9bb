"""Periodic tasks written through django-celery-beat's own models: ``python -m
tests.django_app.celery_beat_rows fill|edit`` in the test site's environment (``site_env``, with
``DJANGO_SETTINGS_MODULE=tests.django_app.site.celery_beat_settings``).

Each migrates the database, then ``fill`` writes a periodic task per case the import meets,
``edit`` moves the nightly report to 04:00 and ``naive`` writes one task with a naive time.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

UTC = timezone.utc


def fill() -> None:
    """One periodic task per case the import maps, and one per case it cannot."""
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    def crontab(tz: str = "UTC", **fields: str) -> CrontabSchedule:
        return CrontabSchedule.objects.create(timezone=ZoneInfo(tz), **fields)

    def every(n: int, period: str) -> IntervalSchedule:
        return IntervalSchedule.objects.create(every=n, period=period)

    def clocked(at: datetime) -> ClockedSchedule:
        return ClockedSchedule.objects.create(clocked_time=at)

    add = PeriodicTask.objects.create
    add(
        name="nightly report", task="app.report",
        crontab=crontab("Europe/Paris", minute="0", hour="3"),
        args='["daily"]', kwargs='{"to": "ops"}', queue="reports", routing_key="reports.nightly",
        priority=5, headers='{"team": "ops"}', expire_seconds=600,
        description="the nightly report",
    )  # fmt: skip
    add(
        name="weekdays", task="app.poll", one_off=True,
        crontab=crontab("America/New_York", minute="*/15", hour="9-17", day_of_week="mon-fri"),
    )  # fmt: skip
    add(name="tick", task="echo", interval=every(1, "seconds"), args='["imported"]')
    add(
        name="two-hourly", task="app.sync", interval=every(2, "hours"), enabled=False,
        start_time=datetime(2030, 1, 1, tzinfo=UTC), expires=datetime(2031, 1, 1, tzinfo=UTC),
        exchange="sync",
    )  # fmt: skip
    add(
        name="launch", task="app.launch", one_off=True,
        clocked=clocked(datetime(2030, 6, 1, 12, tzinfo=UTC)),
    )  # fmt: skip
    add(name="done once", task="app.once", interval=every(1, "hours"), one_off=True,
        total_run_count=1)  # fmt: skip
    add(name="clash", task="app.clash", interval=every(5, "minutes"))
    # What the import cannot map.
    solar = SolarSchedule.objects.create(event="sunrise", latitude=48.85, longitude=2.35)
    add(name="sunrise", task="app.lights", solar=solar)
    add(name="bad json", task="app.report", interval=every(1, "minutes"), args="[1,")
    add(name="first monday", task="app.report",
        crontab=crontab(minute="0", hour="9", day_of_month="1-7", day_of_week="1"))  # fmt: skip
    add(name="tiny", task="app.report", interval=every(10, "microseconds"))
    add(
        name="past",
        task="app.report",
        one_off=True,
        clocked=clocked(datetime(2020, 1, 1, tzinfo=UTC)),
    )


def edit() -> None:
    """The nightly report moves to 04:00."""
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(name="nightly report")
    task.crontab.hour = "4"
    task.crontab.save()


def naive() -> None:
    """A one-off task at 12:00 in ``TIME_ZONE``, as a site with ``USE_TZ = False`` stores it."""
    from django_celery_beat.models import ClockedSchedule, PeriodicTask

    at = ClockedSchedule.objects.create(clocked_time=datetime(2030, 6, 1, 12))
    PeriodicTask.objects.create(name="launch", task="app.launch", one_off=True, clocked=at)


def main(command: str) -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    {"fill": fill, "edit": edit, "naive": naive}[command]()


if __name__ == "__main__":
    main(sys.argv[1])
