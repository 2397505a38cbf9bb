"""Waiting on a store's clock: poll until a condition holds, with a deadline a loaded machine keeps.

A test that needs a lease to run out sleeps no fixed time: the lease is long enough to still hold
while the test checks it (seconds, not tenths), and the test then polls until the store agrees it
ran out. The verdict never rests on how fast this machine happens to be.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from relay import LeaseBackend

T = TypeVar("T")


def wait_until(check: Callable[[], T], what: str, within: float = 30, every: float = 0.1) -> T:
    """``check()``'s first truthy answer; fails naming ``what`` if none came within ``within`` s."""
    deadline = time.monotonic() + within
    while not (answer := check()):
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(every)
    return answer


def lease_ran_out(backend: LeaseBackend, run_id: str, within: float = 30) -> None:
    """Wait until the store's clock is past the run's lease, making no sweep or acquire."""
    job = run_id.rpartition("@")[0]
    (expires_at,) = [r.expires_at for r in backend.runs(job, limit=1000) if r.id == run_id]
    assert expires_at is not None, f"{run_id} holds no lease"
    wait_until(lambda: backend.now() > expires_at, f"the lease of {run_id} runs out", within)
