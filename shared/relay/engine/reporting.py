"""What the deciding half reports: one event per decided run, built from the store's answer.

The store answers an acquire with an :class:`~relay.contract.Outcome` and, when won, the new
:class:`~relay.runs.Run`. Whether a won run is new, taken over, retried or picked up after a
hand-over is read from the run's record *before* the acquire (``previous``): running with an
expired lease is a takeover, pending with reason ``released`` a hand-over, any other pending
record a retry after a failed attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from relay.contract import Outcome
from relay.events import (
    Event,
    RunBuffered,
    RunExhausted,
    RunLost,
    RunPickedUp,
    RunRetried,
    RunSkipped,
    RunsMissed,
    RunTakenOver,
    RunWon,
)
from relay.jobs import Job
from relay.runs import Run, RunRecord, RunState, run_id

__all__ = ["decision_event", "missed_events"]

RELEASED = "released"
"""The reason a lease store writes on a run handed over (``release``)."""


def decision_event(
    outcome: Outcome,
    job: Job,
    slot: datetime,
    owner: str,
    run: Run | None,
    previous: RunRecord | None,
) -> Event:
    """The event for one acquire or claim decided by ``owner``."""
    if outcome is Outcome.WON and run is not None:
        return _won_event(job, run, previous)
    rid = previous.id if previous is not None else run_id(job.name, slot)
    attempt = previous.attempt if previous is not None else 0
    if outcome is Outcome.EXHAUSTED:
        return RunExhausted(rid, job.name, slot, attempt, 0, owner, max_attempts=job.max_attempts)
    if outcome is Outcome.BUFFERED:
        return RunBuffered(rid, job.name, slot, attempt, 0, owner)
    if outcome in (Outcome.OVERLAP, Outcome.STALE, Outcome.PAUSED):
        return RunSkipped(rid, job.name, slot, 0, 0, owner, reason=outcome.value)
    return RunLost(rid, job.name, slot, attempt, 0, owner)


def _won_event(job: Job, run: Run, previous: RunRecord | None) -> Event:
    values = (run.id, run.job, run.scheduled_for, run.attempt, run.token, run.owner)
    if run.attempt <= 1 and previous is None:
        return RunWon(*values)
    if previous is not None and previous.state is RunState.PENDING:
        if previous.reason == RELEASED:
            return RunPickedUp(
                *values, previous_owner=previous.owner or "", previous_attempt=previous.attempt
            )
        if run.attempt <= 1:  # a first attempt waiting: triggered, backfilled, buffered, resumed
            return RunWon(*values)
        return RunRetried(*values, max_attempts=job.max_attempts)
    # Running with an expired lease. (A sweep reads each record before leasing it and a tick only
    # decides slots that had no record, so ``previous`` is missing only in a race: a record
    # written after it was read, whose lease expired before this acquire, a takeover too.)
    return RunTakenOver(
        *values,
        previous_owner=(previous.owner or "") if previous is not None else "",
        previous_attempt=previous.attempt if previous is not None else run.attempt - 1,
        max_attempts=job.max_attempts,
    )


def missed_events(
    missed: Sequence[tuple[str, datetime]], recorded: Sequence[bool], owner: str
) -> list[RunsMissed]:
    """One event per job for the missed slots this instance recorded (not another one)."""
    slots: dict[str, list[datetime]] = {}
    for (job, slot), mine in zip(missed, recorded, strict=True):
        if mine:
            slots.setdefault(job, []).append(slot)
    return [
        RunsMissed(job=job, count=len(found), first=min(found), last=max(found), owner=owner)
        for job, found in slots.items()
    ]
