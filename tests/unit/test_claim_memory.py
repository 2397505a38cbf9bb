"""make_job refuses a stale_after that a claim backend would forget before the run is decided."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import pytest

from relay.errors import ConfigurationError
from relay.jobs import TICK_SPREAD, make_job


class ForgetfulClaims:
    """A claim backend in name only: make_job reads nothing but its kind, name and memory."""

    capability: Literal["claim"] = "claim"

    def __init__(self, remembers_for: float | None) -> None:
        self._memory = remembers_for

    @property
    def name(self) -> str:
        return "Forgetful (window=60s)"

    @property
    def remembers_for(self) -> float | None:
        return self._memory

    def claim(self, job: str, slot: datetime) -> bool:
        raise NotImplementedError

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def test_stale_after_within_the_memory_less_the_tick_spread_is_accepted() -> None:
    job = make_job(ForgetfulClaims(60), name="j", every=60, stale_after=60 - TICK_SPREAD)
    assert job.stale_after == 60 - TICK_SPREAD


def test_stale_after_beyond_it_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_job(ForgetfulClaims(60), name="j", every=60, stale_after=60 - TICK_SPREAD + 1)
    message = str(caught.value)
    assert "Forgetful (window=60s)" in message
    assert f"at least {60 + 1:g}s" in message
    assert "window=" in message and "lower stale_after" in message


@pytest.mark.parametrize("memory", [None, 60.0])
def test_no_stale_after_or_a_memory_for_ever_needs_no_check(memory: float | None) -> None:
    make_job(ForgetfulClaims(memory), name="j", every=60)
    make_job(ForgetfulClaims(None), name="j", every=60, stale_after=10**6)
