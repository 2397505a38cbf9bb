"""The schedule tests use when they must see one slot of a job (``tests.support.slots``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from relay.schedules import make_schedule
from tests.support.slots import one_slot_behind


def test_one_slot_is_due_within_the_catch_up_and_the_next_is_a_day_away() -> None:
    options = one_slot_behind()
    now = datetime.now(timezone.utc)
    schedule = make_schedule(cron=options["cron"], every=None, tz=None)
    window = timedelta(seconds=options["catch_up"])
    assert len(list(schedule.slots_between(now - window, now))) == 1
    # No slot at the top of any hour of the coming day: a test may run across one.
    assert list(schedule.slots_between(now, now + timedelta(hours=23))) == []
