"""Code that must type-check under mypy --strict: the documented uses of the public API."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import relay
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.backends.sqlite_claim import SQLiteClaimBackend
from relay.fencing import SQLFence

by_url = relay.Scheduler("sqlite:///relay.db", lease=30, heartbeat=10)


@by_url.job(every=60, overlap="skip", max_attempts=3, catch_up=3600, stale_after=120)
def refresh(run: relay.Run) -> None:
    token: int = run.token
    print(run.id, run.job, run.scheduled_for, run.attempt, token)


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


current: relay.Run | None = relay.current_run()
