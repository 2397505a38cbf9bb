"""Every backend refuses a naive slot before it writes anything: each host would read it in its own
zone and name a different run. A batch holding one is refused whole: the aware slots in it are
still free afterwards."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from relay import ClaimBackend, ConfigurationError, LeaseBackend, Outcome
from relay.contract import AcquireRequest

UTC = timezone.utc
JOB = "naive-job"
AWARE = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
NAIVE = AWARE.replace(tzinfo=None)
FIX = re.escape("datetime.now(timezone.utc)")


def test_a_lease_backend_refuses_naive_slots_and_records_nothing(
    lease_backend: LeaseBackend,
) -> None:
    with pytest.raises(ConfigurationError, match=FIX):
        lease_backend.skip(JOB, NAIVE, "manual")
    with pytest.raises(ConfigurationError, match=FIX):
        lease_backend.skip_many([(JOB, AWARE), (JOB, NAIVE)], "manual")
    with pytest.raises(ConfigurationError, match=FIX):
        AcquireRequest(JOB, NAIVE, "me", 30)
    assert lease_backend.runs(JOB) == []
    won = lease_backend.acquire(AcquireRequest(JOB, AWARE, "me", 30))
    assert won.outcome is Outcome.WON


def test_a_claim_backend_refuses_naive_slots_and_claims_nothing(
    claim_backend: ClaimBackend,
) -> None:
    with pytest.raises(ConfigurationError, match=FIX):
        claim_backend.claim(JOB, NAIVE)
    with pytest.raises(ConfigurationError, match=FIX):
        claim_backend.claim_many([(JOB, AWARE), (JOB, NAIVE)])
    assert claim_backend.claim(JOB, AWARE) is True
