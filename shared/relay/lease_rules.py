"""The lease rules, as one pure function that stores running Python decide with.

Backends whose step runs inside the store (PostgreSQL's SQL, Redis's Lua) implement the same rules
there; the contract test suite holds every backend to them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from relay.contract import AcquireRequest, Outcome
from relay.runs import RunState, slot_ms

__all__ = ["Action", "Decision", "StoredRun", "decide"]


class Action(enum.Enum):
    """What the store must write for one acquire."""

    LEASE = "lease"
    """Write a new lease: state running, attempt + 1, a new token."""
    SKIP = "skip"
    """Insert the run as skipped with ``Decision.reason``."""
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


@dataclass(frozen=True)
class Decision:
    """The action to write and the outcome to report; ``failures`` is the count to store."""

    action: Action
    outcome: Outcome
    reason: str | None = None
    failures: int = 0


def decide(
    stored: StoredRun | None, request: AcquireRequest, now_ms: int, other_live: bool
) -> Decision:
    """Decide an acquire. ``other_live``: another run of the job holds a live lease."""
    if stored is None:
        age = (now_ms - slot_ms(request.slot)) / 1000
        if request.stale_after is not None and age > request.stale_after:
            return Decision(Action.SKIP, Outcome.STALE, reason="stale")
        if request.overlap_skip and other_live:
            return Decision(Action.SKIP, Outcome.OVERLAP, reason="overlap")
        return Decision(Action.LEASE, Outcome.WON)
    if stored.state.final:
        return Decision(Action.NOTHING, Outcome.FINISHED)
    if stored.state is RunState.RUNNING:
        if stored.expires_ms is not None and stored.expires_ms > now_ms:
            return Decision(Action.NOTHING, Outcome.HELD)
        # The runner stopped heartbeating: its attempt counts as failed.
        failures = stored.failures + 1
    else:
        failures = stored.failures
    if failures >= stored.max_attempts:
        return Decision(Action.FAIL, Outcome.EXHAUSTED, reason="max_attempts", failures=failures)
    return Decision(Action.LEASE, Outcome.WON, failures=failures)
