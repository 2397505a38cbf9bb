"""Claim backends opened from URLs refuse lease-only options and a stale_after they forget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import ConfigurationError, UnsupportedOption
from tests.support.claim_backends import server_claims


@pytest.fixture(params=server_claims())
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with request.param(tmp_path) as url:
        yield url


@pytest.fixture
def scheduler(url: str) -> Iterator[relay.Scheduler[Any]]:
    opened: relay.Scheduler[Any] = relay.Scheduler(url)
    yield opened
    opened.backend.close()


@pytest.mark.parametrize("option", ["lease", "heartbeat"])
def test_scheduler_refuses_lease_options(url: str, option: str) -> None:
    backend = relay.open_backend(url)
    try:
        with pytest.raises(UnsupportedOption) as caught:
            relay.Scheduler(backend, **{option: 30})  # type: ignore[call-overload]
    finally:
        backend.close()
    message = str(caught.value)
    assert caught.value.option == option
    assert backend.name in message
    assert "redis://… (strategy=lease)" in message and "postgresql://" in message


def test_scheduler_from_url_refuses_lease(url: str) -> None:
    with pytest.raises(UnsupportedOption, match="'lease' needs a lease backend"):
        relay.Scheduler(url, lease=30)


@pytest.mark.parametrize(
    "option", [{"overlap": "skip"}, {"max_attempts": 2}, {"catch_up": 600}], ids=str
)
def test_jobs_refuse_lease_options(
    scheduler: relay.Scheduler[Any], option: dict[str, object]
) -> None:
    with pytest.raises(UnsupportedOption) as caught:
        scheduler.job(every=60, **option)(lambda run: None)  # type: ignore[call-overload]
    (name,) = option
    assert caught.value.option == name
    assert scheduler.backend.name in str(caught.value)
    assert scheduler.jobs == {}


def test_stale_after_must_fit_in_the_claim_memory(scheduler: relay.Scheduler[Any]) -> None:
    memory = scheduler.backend.remembers_for  # type: ignore[union-attr]
    if memory is None:
        scheduler.job(every=60, stale_after=10**6, name="forever")(lambda run: None)
        assert "forever" in scheduler.jobs
        return
    scheduler.job(every=60, stale_after=memory - 5, name="fits")(lambda run: None)
    with pytest.raises(ConfigurationError, match=r"too long.*(window|retention)="):
        scheduler.job(every=60, stale_after=memory - 4, name="too-long")(lambda run: None)
    assert set(scheduler.jobs) == {"fits"}
