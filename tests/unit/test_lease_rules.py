"""``relay.lease_rules.decide`` on its own: every rule, as a pure function of its inputs."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from relay.contract import AcquireRequest, Outcome
from relay.lease_rules import BUFFERED, Action, StoredRun, decide
from relay.runs import RunState, slot_ms

SLOT = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
NOW = slot_ms(SLOT) + 10_000  # ten seconds after the slot


def request(**options: Any) -> AcquireRequest:
    return AcquireRequest("job", SLOT, "me", 30, **options)


def stored(state: RunState, **fields: Any) -> StoredRun:
    values: dict[str, Any] = {
        "expires_ms": None, "failures": 0, "max_attempts": 3, "reason": None, "attempt": 1,
        **fields,
    }  # fmt: skip
    return StoredRun(state, **values)


# (stored, request options, decide keywords) -> (action, outcome, reason, failures)
CASES: list[tuple[StoredRun | None, dict[str, Any], dict[str, Any], tuple[Any, ...]]] = [
    (None, {}, {}, (Action.LEASE, Outcome.WON, None, 0)),
    (None, {"stale_after": 5}, {}, (Action.SKIP, Outcome.STALE, "stale", 0)),
    (None, {"stale_after": 60}, {}, (Action.LEASE, Outcome.WON, None, 0)),
    (None, {}, {"paused": True}, (Action.SKIP, Outcome.PAUSED, "paused", 0)),
    (None, {"stale_after": 5}, {"paused": True}, (Action.SKIP, Outcome.STALE, "stale", 0)),
    (None, {"overlap_skip": True}, {"other_live": True},
     (Action.SKIP, Outcome.OVERLAP, "overlap", 0)),
    (None, {"overlap_skip": True}, {}, (Action.LEASE, Outcome.WON, None, 0)),
    (None, {}, {"other_live": True}, (Action.LEASE, Outcome.WON, None, 0)),
    (None, {"buffer_one": True}, {"other_live": True},
     (Action.BUFFER, Outcome.BUFFERED, BUFFERED, 0)),
    (None, {"buffer_one": True}, {"other_live": True, "waiting": True},
     (Action.SKIP, Outcome.OVERLAP, "overlap", 0)),
    (None, {"buffer_one": True}, {}, (Action.LEASE, Outcome.WON, None, 0)),
    (None, {"buffer_one": True}, {"other_live": True, "paused": True},
     (Action.SKIP, Outcome.PAUSED, "paused", 0)),
    (stored(RunState.SUCCEEDED), {}, {}, (Action.NOTHING, Outcome.FINISHED, None, 0)),
    (stored(RunState.SKIPPED, reason="paused"), {}, {},
     (Action.NOTHING, Outcome.FINISHED, None, 0)),
    (stored(RunState.RUNNING, expires_ms=NOW + 1), {}, {"paused": True},
     (Action.NOTHING, Outcome.HELD, None, 0)),
    (stored(RunState.RUNNING, expires_ms=NOW), {}, {}, (Action.LEASE, Outcome.WON, None, 1)),
    (stored(RunState.RUNNING, expires_ms=NOW, failures=2), {}, {},
     (Action.FAIL, Outcome.EXHAUSTED, "max_attempts", 3)),
    (stored(RunState.PENDING, failures=1, reason="failed"), {}, {},
     (Action.LEASE, Outcome.WON, None, 1)),
    (stored(RunState.PENDING, reason="released"), {}, {"paused": True},
     (Action.LEASE, Outcome.WON, None, 0)),
    # Never leased (attempt 0): the request's max_attempts counts, not the stored one.
    (stored(RunState.PENDING, reason="manual", attempt=0, max_attempts=0), {}, {},
     (Action.LEASE, Outcome.WON, None, 0)),
    (stored(RunState.PENDING, reason="manual", attempt=0), {}, {"paused": True},
     (Action.LEASE, Outcome.WON, None, 0)),
    (stored(RunState.PENDING, reason=BUFFERED, attempt=0), {}, {"other_live": True},
     (Action.NOTHING, Outcome.BUFFERED, None, 0)),
    (stored(RunState.PENDING, reason=BUFFERED, attempt=0), {}, {},
     (Action.LEASE, Outcome.WON, None, 0)),
    (stored(RunState.PENDING, reason="released"), {}, {"other_live": True},
     (Action.LEASE, Outcome.WON, None, 0)),
]  # fmt: skip


@pytest.mark.parametrize(("run", "options", "context", "expected"), CASES)
def test_decide(
    run: StoredRun | None,
    options: dict[str, Any],
    context: dict[str, Any],
    expected: tuple[Any, ...],
) -> None:
    context = {"other_live": False, **context}
    decision = decide(run, request(**options), NOW, **context)
    assert (decision.action, decision.outcome, decision.reason, decision.failures) == expected
