"""Schedules for tests that must see exactly one slot of a job, whenever they run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["one_slot_behind"]


def one_slot_behind() -> dict[str, Any]:
    """Job options with one slot to catch up, two minutes ago, and the next a day later.

    ``every=3600, catch_up=3600`` gives one slot too, until a test runs across the top of an
    hour: then a second slot falls due mid-test, and a test counting one run's attempts sees two
    runs. Compute it once in the test and hand the same options to every process it starts.
    """
    past = datetime.now(timezone.utc) - timedelta(minutes=2)
    return {"cron": f"{past.minute} {past.hour} * * *", "catch_up": 3600}
