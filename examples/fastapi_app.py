"""A FastAPI app with an async periodic job inside it: start as many copies as you like.

RELAY_DB=/tmp/relay.db uvicorn examples.fastapi_app:app --port 8001
RELAY_DB=/tmp/relay.db uvicorn examples.fastapi_app:app --port 8002

The app's lifespan serves a Relay scheduler in the app's own event loop: the job is a coroutine
on that loop, the store is reached from threads, and every slot's report is written by one copy
only (they share the SQLite file ``RELAY_DB``; across hosts, use a PostgreSQL, Redis or NATS
URL). On shutdown (SIGTERM, Ctrl-C) a report still being written gets ``stop_timeout`` to
finish, and is then handed over to another copy. ``REPORT_EVERY`` (seconds, default 10) and
``REPORTS`` (a JSON-lines file, default ``reports.jsonl``) exist for trying it out quickly.

The app also mounts Relay's web console at ``/relay/`` (``pip install 'relay-scheduler[console]'``):
open http://127.0.0.1:8001/relay/ to see the job and its runs, pause it, trigger it. Without an
auth hook it answers loopback clients only; give ``auth=`` before serving it to others.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

import relay
import relay.console

STORE = f"sqlite:///{os.environ.get('RELAY_DB', 'relay.db')}"
scheduler = relay.Scheduler(STORE, lease=10, heartbeat=2, stop_timeout=5)


@scheduler.job(every=float(os.environ.get("REPORT_EVERY", "10")), overlap="skip")
async def write_report(run: relay.Run) -> None:
    """Gather figures concurrently, then append the report, keyed by the run's id."""
    figures = await asyncio.gather(count("orders"), count("refunds"))
    line = {"run": run.id, "token": run.token, "pid": os.getpid(), "figures": figures}
    await asyncio.to_thread(append, os.environ.get("REPORTS", "reports.jsonl"), line)


async def count(what: str) -> int:
    """Stands for an awaited call: an HTTP API, an async database driver."""
    await asyncio.sleep(0.1)
    return len(what)


def append(path: str, line: dict[str, Any]) -> None:
    """One short append per report: copies on one host can share the file."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Serve the scheduler for as long as the app runs; leaving hands unfinished runs over."""
    async with scheduler:
        yield


app = FastAPI(lifespan=lifespan)
app.mount("/relay", relay.console.asgi_app(STORE))


@app.get("/")
async def status() -> dict[str, Any]:
    """This copy's name in the store and its jobs."""
    return {"owner": scheduler.owner, "jobs": sorted(scheduler.jobs)}
