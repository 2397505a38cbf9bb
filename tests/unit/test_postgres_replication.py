"""What a PostgreSQL primary's replication settings mean: refuse, warn once, or say nothing."""

from __future__ import annotations

import logging

import pytest

from relay import ConfigurationError
from relay.backends._postgres_replication import ReplicationFacts, check_replication

NONE: tuple[tuple[str, str | None], ...] = ()
ASYNC = (("b", "async"),)
SYNC = (("b", "sync"),)
QUORUM = (("b", "quorum"), ("c", "quorum"))
HIDDEN = (("", None),)  # a user without pg_monitor sees the row, not its state


@pytest.mark.parametrize(
    ("names", "level", "standbys", "require_sync", "expected"),
    [
        ("", "on", NONE, False, "silent"),  # no standby, nothing asked
        ("", "on", ASYNC, False, "warn"),  # standbys, asynchronously
        ("", "on", HIDDEN, False, "warn"),
        ("", "on", NONE, True, "refuse"),
        ("", "on", ASYNC, True, "refuse"),
        ("*", "local", SYNC, True, "refuse"),  # the session does not wait
        ("*", "off", SYNC, False, "warn"),
        ("*", "on", SYNC, True, "silent"),
        ("ANY 1 (*)", "remote_apply", QUORUM, True, "silent"),
        ("*", "remote_write", HIDDEN, True, "silent"),
        ("*", "on", NONE, True, "warn"),  # commits wait for a standby that is not there
        ("*", "on", NONE, False, "silent"),
    ],
)
def test_the_settings_decide(
    names: str,
    level: str,
    standbys: tuple[tuple[str, str | None], ...],
    require_sync: bool,
    expected: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "relay.backends.postgres")
    facts = ReplicationFacts(names, level, False, standbys)
    if expected == "refuse":
        with pytest.raises(ConfigurationError) as caught:
            check_replication(facts, require_sync=require_sync, display="db")
        assert "synchronous_standby_names" in str(caught.value)
        assert "require_sync" in str(caught.value)
        return
    check_replication(facts, require_sync=require_sync, display="db")
    assert len(caplog.records) == (1 if expected == "warn" else 0), caplog.records
    if expected == "warn" and not require_sync:
        assert "require_sync=1" in caplog.records[0].getMessage()
