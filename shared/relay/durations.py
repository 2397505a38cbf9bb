"""Durations: seconds as ``int`` / ``float``, or ``timedelta``; validated once, kept as float."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TypeAlias

from relay.errors import ConfigurationError

__all__ = [
    "MAX_SECONDS",
    "MIN_HEARTBEAT",
    "MIN_LEASE",
    "MIN_TICK",
    "Duration",
    "at_least",
    "non_negative_seconds",
    "optional_seconds",
    "seconds",
]

Duration: TypeAlias = "int | float | timedelta"
"""A length of time: a number of seconds, or a ``timedelta``."""

MAX_SECONDS = 100 * 365.25 * 86400
"""Longest duration (a century): beyond it stores overflow, and it is likely milliseconds."""
MIN_LEASE = 1.0
"""Shortest lease (seconds): below it one slow round trip or pause loses a live runner's lease."""
MIN_HEARTBEAT = 0.1
"""Shortest heartbeat (seconds): each one is a write to the store, for every running run."""
MIN_TICK = 0.01
"""Shortest tick (seconds): a faster tick only spends CPU re-reading the schedules."""


def seconds(value: Duration, name: str) -> float:
    """Return ``value`` in seconds, refusing anything that is not a positive duration."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise ConfigurationError(
            f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}"
        )
    result = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not result > 0:
        raise ConfigurationError(f"{name} must be positive, got {value!r}")
    if math.isinf(result) or result > MAX_SECONDS:
        raise ConfigurationError(
            f"{name}={value!r} is more than a century: durations are seconds (not milliseconds), "
            "or a timedelta"
        )
    return result


def at_least(value: Duration, name: str, floor: float, why: str) -> float:
    """Like :func:`seconds`, but refusing less than ``floor`` seconds; ``why`` says what breaks."""
    result = seconds(value, name)
    if result < floor:
        raise ConfigurationError(
            f"{name}={value!r} is below the {floor:g}s floor: {why}. Use {name}={floor:g} or more"
        )
    return result


def optional_seconds(value: Duration | None, name: str) -> float | None:
    """Like :func:`seconds`, but ``None`` stays ``None`` (the option is off)."""
    return None if value is None else seconds(value, name)


def non_negative_seconds(value: Duration, name: str) -> float:
    """Like :func:`seconds`, but zero is allowed (the option is off)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0.0
    if isinstance(value, timedelta) and value == timedelta(0):
        return 0.0
    return seconds(value, name)
