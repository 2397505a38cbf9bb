"""The words of :class:`~relay.errors.LeaseLost`, the same from every lease backend.

A step (start, heartbeat, finish, release) names a run and the token it was leased with; when
the store changed nothing, the backend looks at what the store holds and says why with these.
"""

from __future__ import annotations

from relay.errors import LeaseLost
from relay.runs import RunState

Found = tuple[str, int] | None
"""What the store holds for a run: its state and current token, or None for no run."""


def is_held(found: Found, token: int) -> bool:
    """Whether ``found`` is a running run leased with ``token``."""
    return found is not None and found[1] == token and found[0] == "running"


def finished_again(state: str, reason: str | None) -> RunState | None:
    """The state a finish recorded, if a run that still has the finishing token stands ``state``
    for ``reason``; ``None`` if something else put it there (an acquire, a hand-over).

    A finish sent again by the token that finished the run (its answer was lost, or too few
    replicas confirmed it) returns this and changes nothing.
    """
    if state == "succeeded" or (state in ("failed", "pending") and reason == "failed"):
        return RunState(state)
    return None


def lease_lost(run_id: str, token: int, found: Found) -> LeaseLost:
    """Why ``token`` no longer holds ``run_id``, given what the store holds (``found``)."""
    if found is None:
        return no_lease(run_id)
    state, current = found
    if current != token:
        return stale_token(run_id, token, current)
    return not_running(run_id, state)


def no_lease(run_id: str) -> LeaseLost:
    """The store holds no run ``run_id``."""
    return LeaseLost(f"run {run_id} has no lease")


def stale_token(run_id: str, token: int, current: object) -> LeaseLost:
    """A newer lease of ``run_id`` (token ``current``) replaced the one with ``token``."""
    return LeaseLost(f"run {run_id}: token {token} is stale, the current token is {current}")


def not_running(run_id: str, state: str) -> LeaseLost:
    """``run_id`` ended (or was handed back) and stands ``state``."""
    return LeaseLost(f"run {run_id} is {state}, no longer running")


def started_elsewhere(run_id: str, token: int, owner: str | None) -> LeaseLost:
    """Another runner, ``owner``, already started this attempt of ``run_id``."""
    return LeaseLost(f"run {run_id} (token {token}) was already started by {owner}")
