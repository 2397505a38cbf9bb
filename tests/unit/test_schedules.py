"""Schedules give every instance the same slots, whenever it ticks."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay import InvalidSchedule
from relay.runs import format_slot, parse_run_id, run_id
from relay.schedules import CronSchedule, EverySchedule, make_schedule

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_every_is_anchored_to_the_epoch() -> None:
    schedule = EverySchedule(60)
    assert schedule.latest_slot(at("2026-11-29T21:30:59.999")) == at("2026-11-29T21:30:00")
    assert schedule.latest_slot(at("2026-11-29T21:31:00")) == at("2026-11-29T21:31:00")
    assert list(schedule.slots_between(at("2026-11-29T21:30:00"), at("2026-11-29T21:32:30"))) == [
        at("2026-11-29T21:31:00"),
        at("2026-11-29T21:32:00"),
    ]


def test_every_accepts_timedelta_and_fractions() -> None:
    assert EverySchedule(timedelta(minutes=5)).interval == 300
    half = EverySchedule(0.5)
    assert half.latest_slot(at("2026-11-29T21:30:00.7")) == at("2026-11-29T21:30:00.5")


@settings(deadline=None)
@given(
    st.floats(min_value=0.001, max_value=86400 * 7),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    st.floats(min_value=0, max_value=50),
)
def test_instances_ticking_at_different_moments_agree(
    interval: float, moment: datetime, lag_in_intervals: float
) -> None:
    """Two instances see the same slot once both have passed it, however far apart they tick."""
    schedule = EverySchedule(interval)
    early = moment.replace(tzinfo=UTC)
    slot = schedule.latest_slot(early)
    assert slot is not None and slot <= early
    late = early + timedelta(seconds=lag_in_intervals * interval)
    later_slots = {
        schedule.latest_slot(late),
        *schedule.slots_between(slot - timedelta(microseconds=1), late),
    }
    assert slot in later_slots


def test_cron_in_utc() -> None:
    schedule = CronSchedule("*/5 * * * *")
    assert schedule.latest_slot(at("2026-11-29T21:34:10")) == at("2026-11-29T21:30:00")
    assert schedule.latest_slot(at("2026-11-29T21:35:00")) == at("2026-11-29T21:35:00")
    between = list(schedule.slots_between(at("2026-11-29T21:30:00"), at("2026-11-29T21:45:00")))
    assert between == [
        at("2026-11-29T21:35:00"),
        at("2026-11-29T21:40:00"),
        at("2026-11-29T21:45:00"),
    ]


def test_cron_with_time_zone_follows_dst() -> None:
    """09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer."""
    schedule = CronSchedule("0 9 * * *", tz="Europe/Paris")
    winter = schedule.latest_slot(at("2026-01-15T12:00:00"))
    summer = schedule.latest_slot(at("2026-07-15T12:00:00"))
    assert winter == at("2026-01-15T08:00:00")
    assert summer == at("2026-07-15T07:00:00")


def test_cron_across_the_spring_forward_gap_fires_once_a_day() -> None:
    schedule = CronSchedule("30 2 * * *", tz=ZoneInfo("Europe/Paris"))
    slots = list(schedule.slots_between(at("2026-03-27T00:00:00"), at("2026-03-31T00:00:00")))
    days = [slot.astimezone(ZoneInfo("Europe/Paris")).date() for slot in slots]
    assert len(days) == len(set(days))  # never twice on one day
    assert all(a < b for a, b in itertools.pairwise(slots))


def test_the_latest_slot_in_the_hour_a_fall_back_repeats_is_the_latest() -> None:
    """Paris goes back from 03:00 CEST to 02:00 CET at 01:00 UTC: 01:30 UTC is 02:30 CET, and
    the slot before it is 01:30 UTC, not 00:30 UTC (02:30 CEST, the hour's first pass)."""
    schedule = CronSchedule("*/5 * * * *", tz="Europe/Paris")
    assert schedule.latest_slot(at("2026-10-25T01:00:00")) == at("2026-10-25T01:00:00")
    assert schedule.latest_slot(at("2026-10-25T01:32:00")) == at("2026-10-25T01:30:00")
    assert schedule.latest_slot(at("2026-10-25T00:59:59")) == at("2026-10-25T00:55:00")
    daily = CronSchedule("30 2 * * *", tz="Europe/Paris")
    assert daily.latest_slot(at("2026-10-25T01:45:00")) == at("2026-10-25T01:30:00")


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [("61 * * * *", "'61 * * * *'"), ("* * *", "'* * *'"), ("every minute", "five fields")],
)
def test_bad_cron_quotes_the_expression(expression: str, fragment: str) -> None:
    with pytest.raises(InvalidSchedule, match="not valid") as caught:
        CronSchedule(expression)
    assert fragment in str(caught.value)


def test_bad_time_zone_and_schedule_combinations() -> None:
    with pytest.raises(InvalidSchedule, match="Europe/Paris"):
        CronSchedule("* * * * *", tz="Mars/Olympus")
    with pytest.raises(InvalidSchedule, match="not both"):
        make_schedule(cron="* * * * *", every=60, tz=None)
    with pytest.raises(InvalidSchedule, match="needs a schedule"):
        make_schedule(cron=None, every=None, tz=None)
    with pytest.raises(InvalidSchedule, match="positive"):
        make_schedule(cron=None, every=0, tz=None)
    with pytest.raises(InvalidSchedule, match="tz= only applies"):
        make_schedule(cron=None, every=5, tz="UTC")


def test_run_ids_are_exact_and_round_trip() -> None:
    slot = at("2026-11-29T21:30:00")
    assert run_id("refresh", slot) == "refresh@2026-11-29T21:30:00Z"
    assert format_slot(at("2026-11-29T21:30:00.250")) == "2026-11-29T21:30:00.250Z"
    assert parse_run_id("a@b@2026-11-29T21:30:00.250Z") == ("a@b", at("2026-11-29T21:30:00.250"))
    paris = slot.astimezone(ZoneInfo("Europe/Paris"))
    assert run_id("refresh", paris) == run_id("refresh", slot)


def test_jobs_with_the_same_schedule_share_one() -> None:
    """100,000 jobs with a few schedules keep a few schedule objects, not 100,000."""
    paris = make_schedule(cron="*/5 * * * *", every=None, tz="Europe/Paris", job="a")
    assert make_schedule(cron="*/5 * * * *", every=None, tz=ZoneInfo("Europe/Paris"), job="b") is (
        paris
    )
    assert make_schedule(cron="*/5 * * * *", every=None, tz="Asia/Tokyo", job="a") is not paris
    assert make_schedule(cron="*/10 * * * *", every=None, tz="Europe/Paris", job="a") is not paris
    minute = make_schedule(cron=None, every=60, tz=None, job="a")
    assert make_schedule(cron=None, every=timedelta(minutes=1), tz=None, job="b") is minute
    assert make_schedule(cron=None, every=61, tz=None, job="a") is not minute
    make_schedule(cron=None, every=1, tz=None)
    with pytest.raises(InvalidSchedule, match="number of seconds"):
        make_schedule(cron=None, every=True, tz=None)  # not the schedule of every=1 (True == 1)


def test_jobs_using_H_keep_their_own_hashed_slots() -> None:
    """H hashes on each job's name: jobs sharing such an expression do not share a schedule."""
    at = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
    mine = make_schedule(cron="H H * * *", every=None, tz=None, job="nightly-report")
    theirs = make_schedule(cron="H H * * *", every=None, tz=None, job="nightly-backup")
    assert mine is not theirs
    assert mine is make_schedule(cron="H H * * *", every=None, tz=None, job="nightly-report")
    assert mine.latest_slot(at) == CronSchedule("H H * * *", job="nightly-report").latest_slot(at)
    assert theirs.latest_slot(at) == CronSchedule("H H * * *", job="nightly-backup").latest_slot(at)
    assert mine.latest_slot(at) != theirs.latest_slot(at)
