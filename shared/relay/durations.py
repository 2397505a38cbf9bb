"""Durations: seconds as ``int`` / ``float``, or ``timedelta``; validated once, kept as float."""

from __future__ import annotations

from datetime import timedelta
from typing import TypeAlias

from relay.errors import ConfigurationError

__all__ = ["Duration", "non_negative_seconds", "optional_seconds", "seconds"]

Duration: TypeAlias = "int | float | timedelta"
"""A length of time: a number of seconds, or a ``timedelta``."""


def seconds(value: Duration, name: str) -> float:
    """Return ``value`` in seconds, refusing anything that is not a positive duration."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise ConfigurationError(
            f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}"
        )
    result = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not result > 0:
        raise ConfigurationError(f"{name} must be positive, got {value!r}")
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
