"""The timeline marks the stretches when a job was overdue, by the expectation it registered."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from relay import AcquireRequest
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.timeline import read, render_html

UTC = timezone.utc
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_an_overdue_stretch_runs_from_the_expectation_to_the_next_success(
    tmp_path: Path,
) -> None:
    now = [T0.timestamp()]
    store = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: now[0])
    store.register_jobs(
        {
            "export": '{"every": 60.0, "schedule": "every 60s"}',
            "quiet": '{"every": 60.0, "schedule": "every 60s", "expect_success_within": false}',
        }
    )
    for job in ("export", "quiet"):
        for minute in (0, 10):
            now[0] = (T0 + timedelta(minutes=minute, seconds=5)).timestamp()
            slot = T0 + timedelta(minutes=minute)
            won = store.acquire(AcquireRequest(job, slot, "a", 30)).run
            assert won is not None
            store.start(won.id, won.token, "a", 30)
            now[0] += 1
            store.finish(won.id, won.token, succeeded=True)
    now[0] = (T0 + timedelta(minutes=11)).timestamp()

    timeline = read(store)

    lanes = {lane.job: lane for lane in timeline.lanes}
    # The slot after 12:00 is 12:01, expected by 12:03 (a minute plus the one-minute grace);
    # the next success finished at 12:10:06.
    assert lanes["export"].overdue == (
        (T0 + timedelta(minutes=3), T0 + timedelta(minutes=10, seconds=6)),
    )
    assert lanes["quiet"].overdue == ()  # opted out
    page = render_html(timeline)
    assert page.count('<g class="overdue"') == 1
    assert "overdue from 2026-11-29T12:03:00.000Z to 2026-11-29T12:10:06.000Z" in page
    store.close()
