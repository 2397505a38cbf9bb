"""``expect_success_within`` and ``alert_after_failures`` reach the job through each way a job is
declared: Celery's ``app.conf.relay_jobs``, Dramatiq's ``@periodic``; refused with the fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from relay.errors import ConfigurationError, UnsupportedOption
from relay.jobs import job_spec
from relay_celery import RelayScheduler
from relay_dramatiq import RelayMiddleware, periodic
from tests.celery_integration.test_safety import make_app


def test_celery_relay_jobs_carry_the_expectation(tmp_path: Path) -> None:
    options = {"tick": {"expect_success_within": 600, "alert_after_failures": 2}}
    scheduler = RelayScheduler(make_app(tmp_path, relay_jobs=options))
    try:
        job = scheduler.decider.jobs["tick"]
        assert (job.expect_success_within, job.alert_after_failures) == (600.0, 2)
        assert json.loads(job_spec(job))["expect_success_within"] == 600.0
    finally:
        scheduler.close()


def test_celery_refuses_a_zero_expectation_naming_the_entry(tmp_path: Path) -> None:
    app = make_app(tmp_path, relay_jobs={"tick": {"expect_success_within": 0}})
    with pytest.raises(ConfigurationError, match="beat_schedule entry 'tick': expect_succ"):
        RelayScheduler(app)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'relay.db'}"))
    yield broker
    broker.close()


def test_dramatiq_periodic_carries_the_expectation(broker: StubBroker) -> None:
    def export() -> None: ...

    actor = periodic(every=3600, expect_success_within=False, alert_after_failures=3)(
        dramatiq.actor(broker=broker, max_retries=0)(export)
    )
    [job] = next(m for m in broker.middleware if isinstance(m, RelayMiddleware)).consumer_jobs
    assert (job.name, job.expect_success_within, job.alert_after_failures) == (
        actor.actor_name, False, 3,
    )  # fmt: skip


def test_dramatiq_periodic_on_a_claim_store_refuses_an_expectation(tmp_path: Path) -> None:
    claims = StubBroker()
    claims.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'c.db'}?strategy=claim"))
    try:

        def export() -> None: ...

        with pytest.raises(UnsupportedOption, match="expect_success_within"):
            periodic(every=60, expect_success_within=600)(
                dramatiq.actor(broker=claims, max_retries=0)(export)
            )
    finally:
        claims.close()
