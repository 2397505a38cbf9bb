"""``Control.next_runs`` and ``relay next``: a job's coming runs, checked against when the fake
clock's scheduler actually starts them."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

import relay
from relay.cli import main
from relay.errors import ConfigurationError, StoreNotFound
from relay.events import RunStarted
from relay.testing import FakeClock

UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)  # the Friday before Paris springs forward


@pytest.fixture
def relay_clock_start() -> datetime:
    return START


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_next_runs_of_a_job_at_0230_paris_across_spring_forward(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str
) -> None:
    @relay_scheduler.job(cron="30 2 * * *", tz="Europe/Paris", name="nightly")
    def nightly(run: relay.Run) -> None: ...

    relay_clock.advance(1)  # the scheduler's first step registers the job with the store
    with relay.Control(relay_store) as control:
        runs = control.next_runs("nightly", 3)
    # 02:30 does not exist on Sunday 29 March: the run starts when the gap ends, 03:00 CEST.
    assert [r.slot for r in runs] == [
        at("2026-03-28T01:30:00"), at("2026-03-29T01:00:00"), at("2026-03-30T00:30:00")
    ]  # fmt: skip
    assert [r.local.strftime("%d %H:%M%z") for r in runs] == [
        "28 02:30+0100", "29 03:00+0200", "30 02:30+0200"
    ]  # fmt: skip
    assert [r.starts_at for r in runs] == [r.slot for r in runs]  # no jitter
    assert runs[1].id == "nightly@2026-03-29T01:00:00Z" and not runs[1].paused


def test_next_runs_start_when_the_scheduler_starts_them_after_jitter(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str
) -> None:
    @relay_scheduler.job(every=3600, jitter=1800, name="hourly")
    def hourly(run: relay.Run) -> None: ...

    started: list[tuple[datetime, datetime]] = []
    relay_scheduler.on(RunStarted, lambda e: started.append((e.slot, relay_clock.now())))
    relay_clock.advance(1)  # registers the job; the slot of 12:00 waits for its own delay
    with relay.Control(relay_store) as control:
        predicted = control.next_runs("hourly", 6)
    relay_clock.advance(hours=5, minutes=30)
    assert predicted[0].slot == START
    assert [(r.slot, r.starts_at) for r in predicted] == started
    delays = {(r.starts_at - r.slot).total_seconds() for r in predicted}
    assert len(delays) == 6 and all(0 < d < 1800 for d in delays)  # each slot its own delay


def test_a_paused_job_shows_its_runs_as_skipped_until_resumed(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str
) -> None:
    @relay_scheduler.job(cron="*/15 * * * *", name="often")
    def often(run: relay.Run) -> None: ...

    relay_clock.advance(1)
    with relay.Control(relay_store) as control:
        control.pause("often", "vendor outage")
        assert all(r.paused for r in control.next_runs("often", 2))
        control.resume("often")
        assert not any(r.paused for r in control.next_runs("often", 2))


def test_relay_next_prints_utc_and_local_and_json(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str
) -> None:
    @relay_scheduler.job(cron="0 9 * * 1-5", tz="Europe/Paris", name="report")
    def report(run: relay.Run) -> None: ...

    relay_clock.advance(1)
    runner = CliRunner()
    shown = runner.invoke(main, ["next", "report", "--count", "2", "--backend", relay_store])
    assert shown.exit_code == 0, shown.output
    assert "report@2026-03-30T07:00:00Z" in shown.output  # Monday 09:00 CEST
    assert "2026-03-30T09:00:00.000+02:00" in shown.output
    lines = runner.invoke(
        main, ["next", "report", "--count", "3", "--json"], env={"RELAY_BACKEND": relay_store}
    ).output.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [row["id"] for row in rows] == [
        "report@2026-03-30T07:00:00Z",
        "report@2026-03-31T07:00:00Z",
        "report@2026-04-01T07:00:00Z",
    ]
    assert rows[0]["timezone"] == "Europe/Paris" and rows[0]["paused"] is False


def test_bad_requests_name_the_fix(
    relay_clock: FakeClock, relay_scheduler: relay.Scheduler[Any], relay_store: str, tmp_path: Path
) -> None:
    @relay_scheduler.job(every=60, name="minute")
    def minute(run: relay.Run) -> None: ...

    relay_clock.advance(1)
    with relay.Control(relay_store) as control:
        with pytest.raises(
            ConfigurationError, match="count=0 is not valid: give a whole number from 1 to 1000"
        ):
            control.next_runs("minute", 0)
        with pytest.raises(ConfigurationError, match="known jobs: minute"):
            control.next_runs("minuet", 1)
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(StoreNotFound):
        relay.Control(missing, read_only=True)
    shown = CliRunner().invoke(main, ["next", "minute", "--backend", missing])
    assert shown.exit_code == 1 and "does not exist" in shown.output
    assert not (tmp_path / "none.db").exists()  # reading created nothing
