"""Every backend refuses a naive slot before it writes anything: each host would read it in its own
zone and name a different run. A batch holding one is refused whole: the aware slots in it are
still free afterwards."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from relay import ClaimBackend, ConfigurationError, LeaseBackend, Outcome, open_backend
from relay.contract import AcquireRequest

UTC = timezone.utc
JOB = "naive-job"
AWARE = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
NAIVE = AWARE.replace(tzinfo=None)
FIX = re.escape("datetime.now(timezone.utc)")


@pytest.fixture
def lease(lease_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(lease_url)
    assert opened.capability == "lease"
    yield opened
    opened.close()


@pytest.fixture
def claims(claim_url: str) -> Iterator[ClaimBackend]:
    opened = open_backend(claim_url)
    assert opened.capability == "claim"
    yield opened
    opened.close()


def test_a_lease_backend_refuses_naive_slots_and_records_nothing(lease: LeaseBackend) -> None:
    with pytest.raises(ConfigurationError, match=FIX):
        lease.skip(JOB, NAIVE, "manual")
    with pytest.raises(ConfigurationError, match=FIX):
        lease.skip_many([(JOB, AWARE), (JOB, NAIVE)], "manual")
    with pytest.raises(ConfigurationError, match=FIX):
        AcquireRequest(JOB, NAIVE, "me", 30)
    assert lease.runs(JOB) == []
    won = lease.acquire(AcquireRequest(JOB, AWARE, "me", 30))
    assert won.outcome is Outcome.WON


def test_a_claim_backend_refuses_naive_slots_and_claims_nothing(claims: ClaimBackend) -> None:
    with pytest.raises(ConfigurationError, match=FIX):
        claims.claim(JOB, NAIVE)
    with pytest.raises(ConfigurationError, match=FIX):
        claims.claim_many([(JOB, AWARE), (JOB, NAIVE)])
    assert claims.claim(JOB, AWARE) is True
