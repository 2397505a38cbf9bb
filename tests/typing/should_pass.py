"""Code that must type-check under mypy --strict: the documented uses of the public API."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from celery import Celery

import relay
import relay.testing
import relay_celery
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.backends.sqlite_claim import SQLiteClaimBackend
from relay.doctor import DoctorReport, Failure
from relay.fencing import SQLFence
from relay.upcoming import NextRun

by_url = relay.Scheduler("sqlite:///relay.db", lease=30, heartbeat=10)


@by_url.job(every=60, overlap="skip", max_attempts=3, catch_up=3600, stale_after=120)
def refresh(run: relay.Run) -> None:
    token: int = run.token
    print(run.id, run.job, run.scheduled_for, run.attempt, token)


@by_url.job(every=60, name="watched", expect_success_within=timedelta(minutes=5))
def watched(run: relay.Run) -> None: ...


@by_url.job(every=60, name="unwatched", expect_success_within=False, alert_after_failures=3)
def unwatched(run: relay.Run) -> None: ...


@by_url.job(every=60, name="async_refresh")
async def async_refresh(run: relay.Run) -> None:
    await asyncio.sleep(0)


async def serve_inside_an_app() -> None:
    async with by_url as scheduler:
        owner: str = scheduler.owner
        print(owner)
    serving: asyncio.Task[None] = asyncio.ensure_future(leases.serve())
    serving.cancel()


leases = relay.Scheduler(SQLiteLeaseBackend("relay.db"), lease=timedelta(seconds=30))


@leases.job(cron="*/5 * * * *", tz="Europe/Paris", overlap="allow", max_attempts=1)
def report(run: relay.Run) -> None:
    SQLFence.sqlite("effects.db").write("report", run.token, "done")


claims = relay.Scheduler(SQLiteClaimBackend("claims.db"), tick=0.5)


@claims.job(every=timedelta(minutes=1), stale_after=30)
def ping(run: relay.Run) -> None: ...


# relay.testing: a FakeClock is a clock, drive() returns what it drives, runs_of gives records.
fake = relay.testing.FakeClock(1_767_225_600.0)  # or an aware datetime
in_fake_time = fake.drive(relay.Scheduler("sqlite:///t.db", clock=fake))
in_fake_time.job(every=60, name="in_fake_time")(refresh)
fake.advance(timedelta(hours=1), minutes=5)
records: list[relay.RunRecord] = relay.testing.runs_of("refresh", store="sqlite:///t.db")
coming: list[NextRun] = relay.Control("sqlite:///t.db").next_runs("refresh", 3)
recent: list[relay.RunRecord] = relay.Control("sqlite:///t.db").runs("refresh", limit=10)
ran_version: int | None = recent[0].schedule_version


current: relay.Run | None = relay.current_run()


def doctor(url: str) -> bool:
    with relay.Control(url, read_only=True) as control:
        checked: DoctorReport = control.doctor()
    twice: list[Failure] = [f.failure for f in checked.findings if f.cost == "run twice"]
    return checked.passes_strict and not twice


# Stored schedules: a task allowed by a lease scheduler, changed through Control.
@leases.task("send_report")
def send_report(run: relay.Run) -> None:
    print(run.args, dict(run.kwargs), run.schedule_version)


stored: relay.Schedule = relay.Control("sqlite:///t.db").add_schedule(
    "report", "send_report", cron="0 3 * * *", tz="Europe/Paris", args=[1], by="ann"
)
changed: relay.Schedule = relay.Control("sqlite:///t.db").update_schedule(
    "report", version=stored.version, every=timedelta(hours=1)
)
changes: list[relay.ScheduleChange] = relay.Control("sqlite:///t.db").schedule_history("report")

# Stored schedules on Celery beat: tasks allowed as a decorator, by name, or by setting.
celery_app = Celery("proj")


@relay_celery.schedulable
@celery_app.task
def celery_report(period: str, to: str = "ops") -> None:
    print(period, to)


celery_report.delay("weekly")  # still the task
relay_celery.schedulable("billing.invoice", "billing.refund", app=celery_app)
celery_app.conf.relay_schedulable_tasks = ["proj.cleanup"]
