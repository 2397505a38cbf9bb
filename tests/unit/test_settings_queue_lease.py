"""The QUEUE_LEASE settings key: how long a scheduler's lease on an enqueued run lasts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from relay.errors import ConfigurationError
from relay.settings import Settings, from_mapping


def test_queue_lease_is_read_in_any_case_and_as_timedelta() -> None:
    assert from_mapping({"queue_lease": 120}).queue_lease == 120.0
    assert from_mapping({"QUEUE_LEASE": timedelta(minutes=5)}).queue_lease == 300.0


def test_queue_lease_defaults_to_none() -> None:
    assert from_mapping({}) == Settings()
    assert Settings().queue_lease is None


def test_bad_queue_lease_names_the_key() -> None:
    with pytest.raises(ConfigurationError, match=r"QUEUE_LEASE"):
        from_mapping({"QUEUE_LEASE": -1})
