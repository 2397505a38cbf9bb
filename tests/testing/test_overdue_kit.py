"""A nightly job turns failing, overdue and recovered in fake time, across the autumn DST change.

``30 1 * * *`` in Europe/Paris: 01:30 CEST is 23:30 UTC the day before until the clocks go back
at 03:00 on Sunday 25 October 2026, then 01:30 CET is 00:30 UTC. So the slot of Sunday 25
(23:30Z on the 24th) is followed 25 hours later by Monday's (00:30Z on the 26th), and the
default expectation of Sunday's slot is those 25 hours plus a tenth of them: 2026-10-26T03:00Z.
The times below are UTC arithmetic, not Relay's schedules.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import relay
from relay.events import Event, JobFailing, JobOverdue, JobRecovered
from relay.overdue import read_health
from relay.testing import FakeClock

UTC = timezone.utc
START = datetime(2026, 10, 22, 12, 0, tzinfo=ZoneInfo("Europe/Paris"))
SUNDAY = datetime(2026, 10, 24, 23, 30, tzinfo=UTC)  # 01:30 CEST on the 25th
MONDAY = datetime(2026, 10, 26, 0, 30, tzinfo=UTC)  # 01:30 CET, after the change
TUESDAY = datetime(2026, 10, 27, 0, 30, tzinfo=UTC)
FAILING = {SUNDAY, MONDAY}


@pytest.fixture
def relay_clock_start() -> datetime:
    return START


def test_failing_overdue_and_recovered_across_dst(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str
) -> None:
    seen: list[tuple[Event, datetime]] = []

    def note(event: Event) -> None:
        seen.append((event, relay_clock.now()))

    @relay_scheduler.job(
        cron="30 1 * * *", tz="Europe/Paris", name="nightly", max_attempts=1,
        alert_after_failures=2,
    )  # fmt: skip
    def nightly(run: relay.Run) -> None:
        if run.scheduled_for in FAILING:
            raise RuntimeError("export failed")

    for kind in (JobOverdue, JobFailing, JobRecovered):
        relay_scheduler.on(kind, note)

    relay_clock.advance(hours=62)  # to 2026-10-25T00:00Z: three slots ran, Sunday's failed
    assert seen == []
    relay_clock.advance(hours=26)  # to 2026-10-26T02:00Z: Monday's slot failed too
    [(failing, at)] = seen
    assert isinstance(failing, JobFailing)
    assert (failing.job, failing.slot, failing.failures) == ("nightly", SUNDAY, 2)
    assert MONDAY <= at < MONDAY + timedelta(minutes=2)

    relay_clock.advance(hours=1.5)  # to 03:30Z: Sunday's slot is overdue
    overdue, at = seen[1]
    assert isinstance(overdue, JobOverdue)
    expected = SUNDAY + timedelta(hours=25 * 1.1)
    assert expected == datetime(2026, 10, 26, 3, 0, tzinfo=UTC)
    assert (overdue.slot, overdue.outcome, overdue.expected_by) == (SUNDAY, "failed", expected)
    assert expected < at <= expected + timedelta(seconds=1)
    with relay.Control(relay_store, read_only=True) as control:
        [health] = read_health(control.backend)  # type: ignore[arg-type]
    assert (health.state, health.overdue, health.failing, health.failures) == (
        "overdue", True, True, 2,
    )  # fmt: skip

    relay_clock.advance(hours=24)  # to 2026-10-27T03:30Z: Tuesday's slot succeeded
    recovered, at = seen[2]
    assert isinstance(recovered, JobRecovered)
    assert (recovered.slot, recovered.was) == (TUESDAY, "overdue")
    assert TUESDAY <= at < TUESDAY + timedelta(minutes=2)
    assert len(seen) == 3
