"""``async def`` actors in real ``dramatiq`` workers (AsyncIO middleware): a lost run is cancelled.

The test takes the run away from the worker the way a takeover does, by moving the run's token
on in the store while the coroutine awaits. The worker's next heartbeat is refused, its
coroutine is cancelled long before its sleep would end, the attempt records nothing more, and
the scheduler takes the run over once its lease runs out: attempt 2 completes it.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from relay.runs import RunState
from tests.dramatiq.procs import Deployment
from tests.dramatiq.test_processes import BROKER_MARKS, deploy, settled
from tests.support.backends import LEASE_BACKENDS
from tests.support.event_log import read_events
from tests.support.slots import one_slot_behind

__all__ = ["deploy"]  # the fixture, used through the parametrization below

pytestmark = pytest.mark.slow

SLEEP = 120.0
"""Seconds attempt 1 awaits: far longer than the test waits for its cancellation."""


def bump_token(backend: str, run_id: str) -> None:
    """Move the run's token on in the store, as a takeover would: the holder's is stale."""
    if backend.startswith("sqlite:///"):
        path = backend.removeprefix("sqlite:///")
        with closing(sqlite3.connect(path, timeout=30)) as conn, conn:
            changed = conn.execute(
                "UPDATE relay_runs SET token = token + 1 WHERE run_id = ? AND state = 'running'",
                (run_id,),
            ).rowcount
    else:
        import psycopg

        parts = urlsplit(backend)
        options = dict(parse_qsl(parts.query))
        schema = options.pop("schema")
        base = urlunsplit(parts._replace(query=urlencode(options)))
        with psycopg.connect(base, autocommit=True, connect_timeout=10) as pg:
            changed = pg.execute(
                f'UPDATE "{schema}".runs SET token = token + 1 '
                "WHERE run_id = %s AND state = 'running'",
                (run_id,),
            ).rowcount
    assert changed == 1


@pytest.mark.parametrize(
    "deploy",
    [pytest.param(("redis", name), marks=[*BROKER_MARKS["redis"], *LEASE_BACKENDS[name][1]],
                  id=f"redis-{name}") for name in ("sqlite", "postgres")],
    indirect=True,
)  # fmt: skip
def test_an_async_actor_whose_run_is_lost_is_cancelled_and_records_nothing_more(
    deploy: Any,
) -> None:
    d: Deployment = deploy({"coro": {**one_slot_behind(), "sleep_first": SLEEP, "async": True}})
    d.worker("worker", threads=1)
    scheduler = d.scheduler("scheduler")
    [start] = d.wait_for("attempt 1 to start", lambda: d.events("start"))
    bumped = time.time()
    bump_token(d.backend, start["run"])

    [cancelled] = d.wait_for("attempt 1 to be cancelled", lambda: d.events("cancelled"))
    assert (cancelled["run"], cancelled["token"], cancelled["attempt"]) == (
        start["run"], start["token"], 1,
    )  # fmt: skip
    assert cancelled["t"] - bumped < SLEEP / 4, d.logs()  # cancelled, not run to its end
    d.wait_for("the run to be taken over and completed", lambda: settled(d, "coro"))

    [record] = d.runs("coro")
    assert (record.state, record.attempt, record.error) == (RunState.SUCCEEDED, 2, None)
    assert [e["attempt"] for e in d.events("done")] == [2]
    events = read_events(d.relay_events)
    [fenced] = [e for e in events if e["relay_event"] == "fenced_off"]
    assert fenced["process"] == cancelled["pid"]  # the worker's (a child of ``dramatiq``)
    assert (fenced["relay_token"], fenced["relay_operation"]) == (start["token"], "heartbeat")
    # Attempt 1 finished neither way: only attempt 2's outcome is reported.
    finished = [e for e in events if e["relay_event"] in ("succeeded", "failed")]
    assert [(e["relay_event"], e["relay_attempt"]) for e in finished] == [("succeeded", 2)]
    [taken] = [e for e in events if e["relay_event"] == "taken_over"]
    assert (taken["process"], taken["relay_previous_attempt"]) == (scheduler.pid, 1)
