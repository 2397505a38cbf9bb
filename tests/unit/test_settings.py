"""One settings reader: a mapping in, validated settings out, errors naming the key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from relay import ConfigurationError
from relay.settings import Settings, from_mapping


def test_defaults_and_any_case() -> None:
    # No default store: each integration uses a shared one it can find, or refuses to start.
    assert from_mapping({}) == Settings(None, None, None, None)
    read = from_mapping({"backend": "redis://x", "Lease": 60, "HEARTBEAT": timedelta(seconds=5)})
    assert read == Settings("redis://x", 60.0, 5.0, None)


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"BACKED": "x"}, "unknown key(s) BACKED"),
        ({"BACKEND": "relay.db"}, "backend URL"),
        ({"LEASE": 0}, "RELAY['LEASE'] must be positive"),
        ({"HEARTBEAT": "ten"}, "RELAY['HEARTBEAT'] must be a number of seconds"),
    ],
)
def test_bad_values_name_the_key(values: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        from_mapping(values)
    assert fragment in str(caught.value)
