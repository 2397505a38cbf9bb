"""External monitors (:mod:`relay.monitors`) register each job's schedule and grace and check in
on start and finish: Healthchecks through its HTTP APIs, Sentry Crons through the real
``sentry-sdk``, both against local fakes of the services (tests/support/fake_monitors.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sentry_sdk

import relay
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.errors import BackendUnavailable, ConfigurationError
from relay.monitors import plan
from relay.monitors.healthchecks import Healthchecks
from relay.monitors.sentry import monitor_config, send_checkins, slug_of
from tests.support.fake_monitors import API_KEY, FakeServices, fake_services

UTC = timezone.utc
SLOT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def services() -> Iterator[FakeServices]:
    with fake_services() as found:
        yield found


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[relay.Scheduler[Any]]:
    store = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: SLOT)
    found = relay.Scheduler(store, lease=30, heartbeat=10, clock=lambda: SLOT, stop_timeout=1)
    found.job(cron="0 3 * * *", tz="Europe/Paris", name="nightly.export")(lambda run: None)

    @found.job(every=300, name="refresh", max_attempts=1, expect_success_within=timedelta(hours=1))
    def refresh(run: relay.Run) -> None:
        raise RuntimeError("boom")

    try:
        yield found
    finally:
        store.close()


def run_once(scheduler: relay.Scheduler[Any]) -> None:
    scheduler.run_pending()
    assert scheduler.join(10)


def test_the_grace_is_the_expectation_or_the_default_expectations_grace(
    scheduler: relay.Scheduler[Any],
) -> None:
    nightly, refresh = plan(scheduler.jobs["nightly.export"]), plan(scheduler.jobs["refresh"])
    assert (nightly.cron, nightly.tz, nightly.every) == ("0 3 * * *", "Europe/Paris", None)
    assert nightly.grace == 86400 // 10  # a tenth of a day between two slots
    assert (refresh.cron, refresh.every, refresh.grace) == (None, 300.0, 3600)


def test_healthchecks_registers_each_job_and_pings_start_and_end(
    services: FakeServices, scheduler: relay.Scheduler[Any]
) -> None:
    monitor = Healthchecks(API_KEY, api_url=services.url)
    urls = monitor.register(scheduler.jobs.values())
    monitor.register(scheduler.jobs.values())  # again: updated, not duplicated
    monitor.send_pings(scheduler.on)
    run_once(scheduler)
    assert monitor.flush()

    checks = services.healthchecks.checks
    assert sorted(checks) == ["nightly.export", "refresh"]
    nightly, refresh = checks["nightly.export"], checks["refresh"]
    assert urls["refresh"].endswith(refresh.uuid)
    assert (nightly.body["schedule"], nightly.body["tz"], nightly.body["grace"]) == (
        "0 3 * * *", "Europe/Paris", 8640,
    )  # fmt: skip
    assert (refresh.body["timeout"], refresh.body["grace"]) == (300, 3600)
    assert [kind for kind, _, _ in refresh.pings] == ["start", "fail"]
    assert refresh.pings[0][1] == refresh.pings[1][1] is not None  # one rid: start and end pair
    assert nightly.pings == []  # its slot is not due at this time
    assert services.healthchecks.status("refresh", datetime.now(UTC)) == "down"


def test_a_worker_that_did_not_register_finds_the_checks_by_name(
    services: FakeServices, scheduler: relay.Scheduler[Any]
) -> None:
    Healthchecks(API_KEY, api_url=services.url).register(scheduler.jobs.values())
    worker = Healthchecks(API_KEY, api_url=services.url)  # another process: nothing registered
    worker.send_pings(scheduler.on)
    run_once(scheduler)
    assert worker.flush()
    assert [kind for kind, _, _ in services.healthchecks.checks["refresh"].pings] == [
        "start", "fail",
    ]  # fmt: skip
    assert sorted(worker.ping_urls) == ["nightly.export", "refresh"]


def test_healthchecks_names_the_fix_for_a_refused_key(services: FakeServices) -> None:
    with pytest.raises(BackendUnavailable, match="api_key is the project's read-write API key"):
        Healthchecks("wrong", api_url=services.url).register(
            [relay.jobs.make_job(SQLiteLeaseBackend(":memory:"), name="x", every=60)]
        )
    with pytest.raises(ConfigurationError, match="API key"):
        Healthchecks("")


def test_sentry_sdk_creates_each_monitor_with_its_schedule_and_checks_in(
    services: FakeServices, scheduler: relay.Scheduler[Any]
) -> None:
    dsn = services.url.replace("http://", "http://publickey@") + "/1"
    sentry_sdk.init(dsn=dsn, default_integrations=False)
    try:
        send_checkins(scheduler.on, scheduler.jobs.values())
        run_once(scheduler)
        sentry_sdk.flush(timeout=10)
    finally:
        sentry_sdk.get_client().close()

    checkins = services.sentry.checkins
    assert [(c["monitor_slug"], c["status"]) for c in checkins] == [
        ("refresh", "in_progress"), ("refresh", "error"),
    ]  # fmt: skip
    opened, closed = checkins
    assert opened["check_in_id"] == closed["check_in_id"]
    assert opened["monitor_config"] == {
        "schedule": {"type": "interval", "value": 5, "unit": "minute"},
        "checkin_margin": 60, "max_runtime": 60,
    }  # fmt: skip
    assert "monitor_config" not in closed and "duration" in closed
    assert monitor_config(scheduler.jobs["nightly.export"]) == {
        "schedule": {"type": "crontab", "value": "0 3 * * *"}, "timezone": "Europe/Paris",
        "checkin_margin": 144, "max_runtime": 144,
    }  # fmt: skip
    assert slug_of("nightly.export") == "nightly-export"
