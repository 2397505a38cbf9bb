"""The Redis lease backend's acquire arguments: each request's line, made once per distinct slot
and settings in a batch, is the line made for that request alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from relay.backends.redis_lease import _member, _request_line, _request_lines
from relay.contract import AcquireRequest

SLOT = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
PLUS_TWO = timezone(timedelta(hours=2))


def _requests() -> list[AcquireRequest]:
    return [
        AcquireRequest("a", SLOT, "me", 30),
        AcquireRequest("b", SLOT, "me", 30),  # shares a's slot and settings
        AcquireRequest("c", SLOT.astimezone(PLUS_TWO), "me", 30.0),  # the same, spelled apart
        AcquireRequest("d", SLOT, "me", 30, max_attempts=3),
        AcquireRequest("e", SLOT, "me", 45, overlap_skip=True),
        AcquireRequest("f", SLOT, "me", 30, buffer_one=True, stale_after=90),
        AcquireRequest("g", SLOT, "me", 30, schedule_version=7),
        AcquireRequest("h", SLOT, "me", 30, manual=True),
        AcquireRequest("i", SLOT + timedelta(milliseconds=250), "me", 30),
        AcquireRequest("a", SLOT + timedelta(minutes=1), "other", 30),
    ]


def test_a_member_is_the_run_id_after_the_job() -> None:
    for request in _requests():
        assert _member(request) == request.id[len(request.job) + 1 :]


def test_a_batch_gives_each_request_the_line_made_for_it_alone() -> None:
    requests = _requests()
    members, lines = _request_lines(requests)
    assert members == [_member(request) for request in requests]
    assert lines == [_request_line(request, _member(request)) for request in requests]
    assert len(set(lines)) == len(requests) - 2  # b and c share a's line
