"""The test kit's headline: two days of a five-minute job in fake time, through a DST change.

A job every five minutes in Europe/Paris runs from Saturday 24 October 2026, 00:00 (CEST) for 48
hours: the clocks go back at 03:00 on Sunday, so 02:00 to 02:55 happens twice, and so do its runs.
The run of the second 02:30 fails twice and succeeds at its third attempt; the job is paused for
an hour in the middle. Every slot, attempt and outcome is checked, against a list of slots built
here from UTC arithmetic alone, not from Relay's schedules.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import relay
from relay.testing import FakeClock, runs_of

UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")
START = datetime(2026, 10, 24, 0, 0, tzinfo=PARIS)  # 2026-10-23T22:00Z
SECOND_0230 = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)  # 02:30 CET, after the clocks went back
PAUSED_AT = START.astimezone(UTC) + timedelta(hours=30)  # aware arithmetic in UTC: elapsed time


@pytest.fixture
def relay_clock_start() -> datetime:
    return START


def test_two_days_with_dst_retries_and_a_pause(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str
) -> None:
    ran: list[tuple[datetime, int, datetime]] = []

    @relay_scheduler.job(cron="*/5 * * * *", tz="Europe/Paris", max_attempts=3, name="tick")
    def tick(run: relay.Run) -> None:
        ran.append((run.scheduled_for, run.attempt, relay_clock.now()))
        if run.scheduled_for == SECOND_0230 and run.attempt < 3:
            raise RuntimeError(f"attempt {run.attempt} fails")

    relay_clock.advance(hours=30)
    with relay.Control(relay_store) as control:
        control.pause("tick", "maintenance")
        relay_clock.advance(hours=1)
        control.resume("tick")
    relay_clock.advance(hours=17)

    slots = [START.astimezone(UTC) + timedelta(minutes=5 * k) for k in range(48 * 12 + 1)]
    paused = {PAUSED_AT + timedelta(minutes=5 * k) for k in range(1, 13)}
    records = runs_of("tick")
    assert [r.scheduled_for for r in records] == slots
    assert {r.scheduled_for for r in records if r.state is relay.RunState.SKIPPED} == paused
    assert all(r.reason == "paused" for r in records if r.scheduled_for in paused)
    [retried] = [r for r in records if r.scheduled_for == SECOND_0230]
    assert (retried.state, retried.attempt, retried.failures) == ("succeeded", 3, 2)
    others = [r for r in records if r.scheduled_for not in paused | {SECOND_0230}]
    assert {(r.state, r.attempt) for r in others} == {(relay.RunState.SUCCEEDED, 1)}

    # Each attempt ran at its slot, or a heartbeat (10 s) after the attempt before it failed.
    expected = []
    for slot in slots:
        if slot in paused:
            continue
        expected.append((slot, 1, slot))
        if slot == SECOND_0230:
            expected += [(slot, 2, slot + timedelta(seconds=10))]
            expected += [(slot, 3, slot + timedelta(seconds=20))]
    assert ran == expected
    local = [s.astimezone(PARIS).strftime("%H:%M%z") for s in slots if s.day == 25]
    assert local.count("02:30+0200") == local.count("02:30+0100") == 1
