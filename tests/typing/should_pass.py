"""Code that must type-check under mypy --strict: the documented uses of the public API."""

from __future__ import annotations

from datetime import timedelta

import relay
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.backends.sqlite_claim import SQLiteClaimBackend
from relay.doctor import DoctorReport, Failure
from relay.fencing import SQLFence

by_url = relay.Scheduler("sqlite:///relay.db", lease=30, heartbeat=10)


@by_url.job(every=60, overlap="skip", max_attempts=3, catch_up=3600, stale_after=120)
def refresh(run: relay.Run) -> None:
    token: int = run.token
    print(run.id, run.job, run.scheduled_for, run.attempt, token)


leases = relay.Scheduler(SQLiteLeaseBackend("relay.db"), lease=timedelta(seconds=30))


@leases.job(cron="*/5 * * * *", tz="Europe/Paris", overlap="allow", max_attempts=1)
def report(run: relay.Run) -> None:
    SQLFence.sqlite("effects.db").write("report", run.token, "done")


claims = relay.Scheduler(SQLiteClaimBackend("claims.db"), tick=0.5)


@claims.job(every=timedelta(minutes=1), stale_after=30)
def ping(run: relay.Run) -> None: ...


current: relay.Run | None = relay.current_run()


def doctor(url: str) -> bool:
    with relay.Control(url, read_only=True) as control:
        checked: DoctorReport = control.doctor()
    twice: list[Failure] = [f.failure for f in checked.findings if f.cost == "run twice"]
    return checked.passes_strict and not twice
