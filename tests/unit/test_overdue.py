"""Expectations (:mod:`relay.expectations`) are checked at creation, and the decision
(:func:`relay.overdue.decide`) reads a job's history as the docs say, case by case."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import relay
from relay import ConfigurationError, UnsupportedOption
from relay.contract import JobHistory
from relay.expectations import expected_by
from relay.jobs import job_spec, make_job
from relay.metrics import export_jobs
from relay.overdue import decide, ranked, read_health
from relay.runs import RunRecord, RunState, run_id
from relay.schedules import make_schedule
from relay.stored import check_schedule, from_row, to_definition

UTC = timezone.utc
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MINUTE = make_schedule(cron=None, every=60, tz=None)


def record(minute: int, state: str, reason: str | None = None, manual: bool = False) -> RunRecord:
    slot = T0 + timedelta(minutes=minute)
    return RunRecord(
        id=run_id("job", slot, manual=manual), job="job", scheduled_for=slot,
        state=RunState(state), attempt=1, failures=0, token=1, owner="a", reason=reason,
        expires_at=None, started_at=slot, finished_at=slot + timedelta(seconds=5),
    )  # fmt: skip


def at(minute: float) -> datetime:
    return T0 + timedelta(minutes=minute)


# -- options ----------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Any:
    backend = relay.open_backend(f"sqlite:///{tmp_path / 'r.db'}")
    yield backend
    backend.close()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "must be longer than 0 s"),
        (-5, "must be longer than 0 s"),
        (timedelta(0), "must be longer than 0 s"),
        (True, "is not a duration"),
        ("1h", "must be a number of seconds or a timedelta"),
    ],
)
def test_a_bad_expectation_is_refused_with_the_fix(store: Any, value: Any, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        make_job(store, name="job", every=60, expect_success_within=value)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "3"])
def test_a_bad_failure_count_is_refused(store: Any, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"alert_after_failures=.* whole number >= 1"):
        make_job(store, name="job", every=60, alert_after_failures=value)


def test_a_claim_backend_keeps_no_outcomes_to_expect(tmp_path: Path) -> None:
    claims = relay.open_backend(f"sqlite:///{tmp_path / 'c.db'}?strategy=claim")
    for option in ("expect_success_within", "alert_after_failures"):
        with pytest.raises(UnsupportedOption, match=f"Drop '{option}', or use a lease backend"):
            make_job(claims, name="job", every=60, **{option: 3})
    assert make_job(claims, name="job", every=60, expect_success_within=False)  # opting out


def test_the_spec_carries_the_options_only_when_set(store: Any) -> None:
    plain = json.loads(job_spec(make_job(store, name="a", every=60)))
    assert "expect_success_within" not in plain and "alert_after_failures" not in plain
    both = json.loads(
        job_spec(
            make_job(
                store, name="a", every=60, expect_success_within=timedelta(minutes=30),
                alert_after_failures=2,
            )
        )
    )  # fmt: skip
    assert (both["expect_success_within"], both["alert_after_failures"]) == (1800.0, 2)
    off = json.loads(job_spec(make_job(store, name="a", every=60, expect_success_within=False)))
    assert off["expect_success_within"] is False


def test_stored_schedules_and_celery_entries_take_the_options(store: Any) -> None:
    schedule = check_schedule(
        store, "nightly", "tasks.export", cron="0 3 * * *", expect_success_within=7200,
        alert_after_failures=3,
    )  # fmt: skip
    assert to_definition(schedule)["expect_success_within"] == 7200.0
    assert "alert_after_failures" not in to_definition(
        check_schedule(store, "other", "tasks.export", every=60)
    )
    with pytest.raises(ConfigurationError, match="longer than 0 s"):
        check_schedule(store, "bad", "tasks.export", every=60, expect_success_within=-1)
    from relay_celery.entries import RELAY_OPTIONS

    assert {"expect_success_within", "alert_after_failures"} <= RELAY_OPTIONS
    assert from_row  # the stored definition reads back through the same fields


# -- the default expectation ------------------------------------------------------------------


def test_the_default_is_the_interval_to_the_next_slot_plus_a_tenth_at_least_a_minute() -> None:
    assert expected_by(MINUTE, T0, None) == T0 + timedelta(seconds=120)  # 60 + at least 60
    daily = make_schedule(cron="0 2 * * *", every=None, tz="UTC")
    assert expected_by(daily, T0.replace(hour=2), None) == T0.replace(hour=2) + timedelta(
        hours=26, minutes=24
    )
    assert expected_by(MINUTE, T0, None, jitter=30) == T0 + timedelta(seconds=150)
    assert expected_by(MINUTE, T0, 600.0) == T0 + timedelta(seconds=600)
    assert expected_by(MINUTE, T0, False) is None


# -- the decision -----------------------------------------------------------------------------


def test_a_job_whose_every_slot_succeeded_is_ok_and_expects_the_next() -> None:
    history = JobHistory((record(2, "succeeded"), record(1, "succeeded")), record(2, "succeeded"))
    found = decide("job", MINUTE, history, at(2.5))
    assert (found.state, found.slot, found.failures) == ("ok", None, 0)
    assert found.expected_by == at(3) + timedelta(seconds=120)
    assert found.last_success == at(2) + timedelta(seconds=5)


def test_overdue_once_the_oldest_slot_not_succeeded_passes_its_expectation() -> None:
    history = JobHistory((record(3, "failed"), record(2, "succeeded")), record(2, "succeeded"))
    assert decide("job", MINUTE, history, at(4.9)).state == "ok"  # 3 + 2 min not passed yet
    found = decide("job", MINUTE, history, at(5.1))
    assert (found.state, found.slot, found.outcome) == ("overdue", at(3), "failed")
    assert (found.failures, found.expected_by) == (1, at(5))
    later = decide("job", MINUTE, history, at(6.5))
    assert later.failures == 2  # the failed 3, and the 4 with no record past its expectation


def test_failing_counts_failed_missed_and_stale_but_not_overlaps() -> None:
    recent = (
        record(5, "skipped", "stale"), record(4, "skipped", "overlap"), record(3, "failed"),
        record(2, "skipped", "missed"), record(1, "succeeded"),
    )  # fmt: skip
    found = decide(
        "job", MINUTE, JobHistory(recent, recent[-1]), at(5.5), within=3600,
        alert_after_failures=3,
    )  # fmt: skip
    assert (found.state, found.failing, found.overdue, found.failures) == (
        "failing", True, False, 3,
    )  # fmt: skip
    assert found.outcome == "missed"


def test_a_manual_success_clears_the_slots_before_it() -> None:
    manual = record(4, "succeeded", manual=True)
    history = JobHistory((record(3, "failed"), record(2, "failed")), manual)
    found = decide("job", MINUTE, history, at(4.5), alert_after_failures=1)
    assert (found.state, found.failures, found.last_success_slot) == ("ok", 0, at(4))


def test_paused_off_and_waiting_are_never_alerting() -> None:
    late = JobHistory((record(1, "failed"),), None)
    assert decide("job", MINUTE, late, at(60), paused=True).state == "paused"
    assert decide("job", MINUTE, late, at(60), within=False).state == "off"
    alerting = decide("job", MINUTE, late, at(60), within=False, alert_after_failures=1)
    assert (alerting.state, alerting.overdue) == ("failing", False)
    waiting = decide("job", MINUTE, JobHistory((), None), at(60))
    assert (waiting.state, waiting.alerting) == ("waiting", False)
    assert waiting.expected_by == at(61) + timedelta(seconds=120)
    assert [h.state for h in ranked([waiting, alerting])] == ["failing", "waiting"]


# -- from the store, and exported ---------------------------------------------------------------


def test_a_disabled_stored_schedule_is_paused_and_a_removed_one_gone(store: Any) -> None:
    with relay.Control(store) as control:
        added = control.add_schedule("report", "tasks.report", every=60, force=True)
        control.add_schedule("gone", "tasks.report", every=60, force=True)
        control.update_schedule("report", version=added.version, enabled=False)
        control.remove_schedule("gone")
    assert [(h.job, h.state) for h in read_health(store)] == [("report", "paused")]


def test_the_exporter_reads_the_store_at_each_scrape(store: Any) -> None:
    store.register_jobs({"late": '{"every": 60}', "never": '{"every": 60}'})
    slot = (store.now() - timedelta(hours=1)).replace(second=0, microsecond=0)
    store.skip("late", slot, "missed")
    registry = CollectorRegistry()
    export_jobs(store, registry, cache=0)
    text = generate_latest(registry).decode()
    assert 'relay_job_overdue{job="late"} 1.0' in text
    assert 'relay_job_expected_success_by_timestamp_seconds{job="never"} +Inf' in text
    expected = (slot + timedelta(seconds=120)).timestamp()
    [line] = [x for x in text.splitlines() if x.startswith("relay_job_expected") and "late" in x]
    assert float(line.rpartition(" ")[2]) == expected
    assert "relay_job_last_success_timestamp_seconds{" not in text  # neither succeeded yet
