"""Options are validated once, when a job or scheduler is created, and lease-only ones refused."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import relay
from relay import ConfigurationError, UnknownBackend, UnsupportedOption
from relay.jobs import DEFAULT_MAX_ATTEMPTS, make_job


@pytest.fixture
def lease_scheduler(tmp_path: Path) -> relay.Scheduler:  # type: ignore[type-arg]
    return relay.Scheduler(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.fixture
def claim_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'c.db'}?strategy=claim"


def test_defaults(lease_scheduler: relay.Scheduler) -> None:  # type: ignore[type-arg]
    @lease_scheduler.job(every=60)
    def refresh(run: relay.Run) -> None: ...

    job = lease_scheduler.jobs["test_defaults.<locals>.refresh"]
    assert (job.overlap, job.max_attempts, job.catch_up, job.stale_after) == (
        "allow", DEFAULT_MAX_ATTEMPTS, 0.0, None,
    )  # fmt: skip
    assert (lease_scheduler.lease, lease_scheduler.heartbeat) == (30.0, 10.0)


def test_options_accept_seconds_and_timedelta(lease_scheduler: relay.Scheduler) -> None:  # type: ignore[type-arg]
    @lease_scheduler.job(
        name="r", cron="*/5 * * * *", tz="Europe/Paris", overlap="skip", max_attempts=2,
        catch_up=timedelta(hours=1), stale_after=120,
    )  # fmt: skip
    def refresh(run: relay.Run) -> None: ...

    job = lease_scheduler.jobs["r"]
    assert (job.overlap, job.max_attempts, job.catch_up, job.stale_after) == (
        "skip",
        2,
        3600.0,
        120.0,
    )
    assert job.handler is refresh


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"every": 60, "overlap": "sometimes"}, "'allow' or 'skip'"),
        ({"every": 60, "max_attempts": 0}, "max_attempts"),
        ({"every": 60, "catch_up": -1}, "catch_up must be positive"),
        ({"every": 60, "stale_after": 0}, "stale_after must be positive"),
        ({"every": 60, "cron": "* * * * *"}, "not both"),
        ({"cron": "nope"}, "'nope'"),
    ],
)
def test_bad_job_options_name_the_fix(
    lease_scheduler: relay.Scheduler,
    options: dict[str, object],
    fragment: str,  # type: ignore[type-arg]
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        lease_scheduler.job(**options)(lambda run: None)  # type: ignore[arg-type]
    assert fragment in str(caught.value)


def test_bad_scheduler_options(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with pytest.raises(ConfigurationError, match=r"heartbeat .* must be shorter than lease"):
        relay.Scheduler(url, lease=10, heartbeat=10)
    with pytest.raises(ConfigurationError, match="lease must be positive"):
        relay.Scheduler(url, lease=-5)
    with pytest.raises(UnknownBackend, match=r"known schemes: .*sqlite://"):
        relay.Scheduler("mysql://localhost/db")
    with pytest.raises(UnknownBackend, match="known strategies"):
        relay.Scheduler("redis://localhost?strategy=paxos")
    with pytest.raises(ConfigurationError, match="malformed"):
        relay.Scheduler("relay.db")
    with pytest.raises(ConfigurationError, match="does not know the URL option"):
        relay.Scheduler(f"{url}?busy=1")


def test_duplicate_job_names_are_refused(lease_scheduler: relay.Scheduler) -> None:  # type: ignore[type-arg]
    lease_scheduler.job(every=1, name="x")(lambda run: None)
    with pytest.raises(ValueError, match="already scheduled"):
        lease_scheduler.job(every=2, name="x")(lambda run: None)


@pytest.mark.parametrize("option", ["overlap", "max_attempts", "catch_up"])
def test_claim_backend_refuses_lease_only_job_options(claim_url: str, option: str) -> None:
    scheduler = relay.Scheduler(claim_url)
    value = {"overlap": "skip", "max_attempts": 3, "catch_up": 60}[option]
    with pytest.raises(UnsupportedOption) as caught:
        scheduler.job(every=60, **{option: value})(lambda run: None)
    message = str(caught.value)
    assert f"'{option}'" in message and "SQLite claims" in message and "postgresql://" in message
    assert caught.value.option == option


@pytest.mark.parametrize("option", ["lease", "heartbeat"])
def test_claim_backend_refuses_lease_only_scheduler_options(claim_url: str, option: str) -> None:
    with pytest.raises(UnsupportedOption, match=f"'{option}' needs a lease backend"):
        relay.Scheduler(claim_url, **{option: 5})


def test_claim_backend_accepts_what_it_can_honour(claim_url: str) -> None:
    scheduler = relay.Scheduler(claim_url)
    scheduler.job(every=60, stale_after=30, name="ok")(lambda run: None)
    assert scheduler.jobs["ok"].stale_after == 30


def test_make_job_refuses_names_that_break_run_ids(tmp_path: Path) -> None:
    backend = relay.open_backend(f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(ConfigurationError, match="without '@'"):
        make_job(backend, name="a@b", every=1)
