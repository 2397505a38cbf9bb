"""Slots for the claim backend tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

__all__ = ["slots"]

BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)


def slots(count: int, start: datetime = BASE) -> list[datetime]:
    """``count`` slots a minute apart."""
    return [start + timedelta(minutes=i) for i in range(count)]
