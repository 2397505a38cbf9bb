"""Milliseconds, as every store keeps its times: from seconds, back to datetimes and records.

Slots themselves convert with :func:`relay.runs.slot_ms` and :func:`relay.runs.from_ms`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from relay.instances import InstanceInfo, parse_definitions
from relay.runs import from_ms


def ms(seconds: float) -> int:
    """``seconds`` in whole milliseconds, rounded to the nearest."""
    return round(seconds * 1000)


def positive_ms(seconds: float) -> int:
    """``seconds`` in whole milliseconds, cut down but at least 1 (an expiry the server takes)."""
    return max(int(seconds * 1000), 1)


def optional_from_ms(value: int | None) -> datetime | None:
    """The UTC datetime of ``value`` milliseconds, or None for no value."""
    return None if value is None else from_ms(value)


def instance_from_fields(owner: str, fields: Mapping[str, Any]) -> InstanceInfo:
    """An instance's record from the fields a key-value store keeps (times in milliseconds)."""
    return InstanceInfo(
        owner=owner, role=fields["role"], host=fields["host"], pid=int(fields["pid"]),
        started_at=from_ms(int(fields["started_ms"])), version=fields["version"],
        interval=float(fields["interval"]), beat_at=from_ms(int(fields["beat_ms"])),
        expires_at=from_ms(int(fields["expires_ms"])), tasks=tuple(fields.get("tasks") or ()),
        problem=fields.get("problem"), **parse_definitions(fields.get("definitions")),
    )  # fmt: skip
