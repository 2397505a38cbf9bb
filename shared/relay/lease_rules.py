"""The lease rules, as one pure function that stores running Python decide with.

Backends whose step runs inside the store (PostgreSQL's SQL, Redis's Lua) implement the same rules
there; the contract test suite holds every backend to them (``RULES`` in
``tests/contract/test_lease_rules_contract.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from relay.contract import AcquireRequest, Outcome
from relay.runs import RunState, slot_ms

__all__ = ["BUFFERED", "Action", "Decision", "StoredRun", "decide"]

BUFFERED = "buffered"
"""The reason of a pending run waiting for its job's live run to end (``overlap="buffer_one"``)."""


class Action(enum.Enum):
    """What the store must write for one acquire."""

    LEASE = "lease"
    """Write a new lease: state running, attempt + 1, a new token."""
    SKIP = "skip"
    """Insert the run as skipped with ``Decision.reason``."""
    BUFFER = "buffer"
    """Insert the run as pending with reason ``buffered``: it waits for the live run to end."""
    FAIL = "fail"
    """Mark the run failed: it has used all its attempts."""
    NOTHING = "nothing"
    """Leave the store as it is."""


@dataclass(frozen=True)
class StoredRun:
    """The parts of a stored run that an acquire decision reads."""

    state: RunState
    expires_ms: int | None
    failures: int
    max_attempts: int
    reason: str | None
    attempt: int = 1
    """0 for a run never leased yet (manual, backfilled, resumed or buffered): it takes the
    request's ``max_attempts`` when it is first leased."""


@dataclass(frozen=True)
class Decision:
    """The action to write and the outcome to report; ``failures`` is the count to store."""

    action: Action
    outcome: Outcome
    reason: str | None = None
    failures: int = 0


def decide(
    stored: StoredRun | None,
    request: AcquireRequest,
    now_ms: int,
    other_live: bool,
    *,
    paused: bool = False,
    waiting: bool = False,
) -> Decision:
    """Decide an acquire.

    ``other_live``: another run of the job holds a live lease. ``paused``: the job is paused.
    ``waiting``: another run of the job already waits (pending, reason ``buffered``).
    """
    if stored is None:
        return _decide_new(request, now_ms, other_live, paused=paused, waiting=waiting)
    if stored.state.final:
        return Decision(Action.NOTHING, Outcome.FINISHED)
    if stored.state is RunState.RUNNING:
        if stored.expires_ms is not None and stored.expires_ms > now_ms:
            return Decision(Action.NOTHING, Outcome.HELD)
        # The runner stopped heartbeating: its attempt counts as failed.
        failures = stored.failures + 1
    else:
        if stored.reason == BUFFERED and other_live:
            return Decision(Action.NOTHING, Outcome.BUFFERED)
        failures = stored.failures
    limit = request.max_attempts if stored.attempt == 0 else stored.max_attempts
    if failures >= limit:
        return Decision(Action.FAIL, Outcome.EXHAUSTED, reason="max_attempts", failures=failures)
    return Decision(Action.LEASE, Outcome.WON, failures=failures)


def _decide_new(
    request: AcquireRequest, now_ms: int, other_live: bool, *, paused: bool, waiting: bool
) -> Decision:
    """Decide a run the store has no record of."""
    age = (now_ms - slot_ms(request.slot)) / 1000
    if request.stale_after is not None and age > request.stale_after:
        return Decision(Action.SKIP, Outcome.STALE, reason="stale")
    if paused:
        return Decision(Action.SKIP, Outcome.PAUSED, reason="paused")
    if other_live and (request.overlap_skip or (request.buffer_one and waiting)):
        return Decision(Action.SKIP, Outcome.OVERLAP, reason="overlap")
    if other_live and request.buffer_one:
        return Decision(Action.BUFFER, Outcome.BUFFERED, reason=BUFFERED)
    return Decision(Action.LEASE, Outcome.WON)
