"""The engine: the deciding and running halves of a run, and the loop that steps the deciding half.

It is the only code that emits :mod:`relay.events`.
"""

from relay.engine.deciding import Decider, Won
from relay.engine.looping import MAX_BACKOFF, Loop, Step
from relay.engine.renewing import Renewals
from relay.engine.running import (
    ActiveRun,
    FinishLimit,
    Runner,
    current_run,
    enter_run,
    fenced_write_refused,
    leave_run,
)
from relay.engine.unacknowledged import HandBackLater

__all__ = [
    "MAX_BACKOFF",
    "ActiveRun",
    "Decider",
    "FinishLimit",
    "HandBackLater",
    "Loop",
    "Renewals",
    "Runner",
    "Step",
    "Won",
    "current_run",
    "enter_run",
    "fenced_write_refused",
    "leave_run",
]
