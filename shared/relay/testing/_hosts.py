"""What a :class:`~relay.testing.FakeClock` drives: hosts stepped at the fake instants they ask for.

A standalone :class:`relay.Scheduler` is stepped through its engine loop and runs what it wins
here, one run after the other, in the thread that advances the clock. Any other host (Celery's
``RelayScheduler.tick``, the Dramatiq scheduler's ``step``) is a function that steps it and returns
the seconds until it wants to be stepped again, as those hosts' own loops do.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any, Protocol

from relay.contract import is_lease
from relay.engine import Runner, Won
from relay.engine.coroutines import call_handler
from relay.errors import BackendUnavailable, NotAcknowledged
from relay.scheduler import Scheduler

__all__ = ["Host", "InlineScheduler", "SimulatedCrash", "SteppedHost"]

_NEVER_BEATS = math.inf
"""The heartbeat of inline runs: a run takes no fake time, so it never renews (and no thread)."""


class SimulatedCrash(BaseException):
    """Raise it in a handler run by the fake clock to play an instance killed mid-run.

    Nothing is recorded for the attempt: its lease runs out in fake time and the scheduler's next
    sweep after that takes the run over, as attempt + 1 with a newer token.
    """


class Host(Protocol):
    """Something the fake clock steps."""

    def next_at(self) -> float:
        """The fake time (seconds since the epoch) this host next has something to do."""
        ...

    def step(self, now: float) -> None:
        """Do what is due at ``now``."""
        ...

    def poke(self, now: float) -> None:
        """Something may have changed outside (a trigger, a pause): look at ``now``."""
        ...


class SteppedHost:
    """A host stepped by a function returning the seconds until its next useful step."""

    def __init__(self, step: Callable[[], float], settle: Callable[[], object] | None) -> None:
        self.driven = step
        """The function :meth:`FakeClock.drive` was given."""
        self._step = step
        self._settle = settle
        self._next = -math.inf

    def next_at(self) -> float:
        return self._next

    def step(self, now: float) -> None:
        wait = float(self._step())
        if self._settle is not None:
            self._settle()
        self._next = now + max(wait, 0.0)

    def poke(self, now: float) -> None:
        self._next = min(self._next, now)


class InlineScheduler:
    """Steps a :class:`relay.Scheduler` on the fake clock and runs each run it wins here.

    Its sweeps (retries, takeovers, triggered and resumed runs) happen when one can find
    something: a heartbeat after a run of its ended (the latest a live instance sweeps), a
    heartbeat after a crashed run's lease ran out, and at the first step of every advance.
    """

    def __init__(self, scheduler: Scheduler[Any], clock: Callable[[], float]) -> None:
        self.scheduler = scheduler
        self.clock = clock
        scheduler.decider.clock = clock
        scheduler.runner.clock = clock
        scheduler.loop.monotonic = clock
        self.runner = Runner(
            scheduler.backend, owner=scheduler.owner, lease=scheduler.lease,
            heartbeat=_NEVER_BEATS, events=scheduler.events, clock=clock,
        )  # fmt: skip
        self._sweeps: list[float] = [-math.inf]
        self._retry_at = -math.inf

    def next_at(self) -> float:
        due = self.scheduler.decider.next_due()
        at = math.inf if due is None else due.timestamp()
        beat = self.scheduler.loop.next_beat()  # a peer declares one of its jobs: beat as live
        if beat is not None:
            at = min(at, beat)
        if self._sweeps:
            at = min(at, self._sweeps[0])
        watch = self.scheduler.loop.watch
        if watch is not None:  # a job's expectation passes: announce it on time
            at = min(at, watch.wake_at)
        return max(at, self._retry_at)

    def poke(self, now: float) -> None:
        heapq.heappush(self._sweeps, now)

    def step(self, now: float) -> None:
        loop = self.scheduler.loop
        sweeping = is_lease(self.scheduler.backend) and bool(self._sweeps)
        sweeping = sweeping and self._sweeps[0] <= now
        loop.next_sweep = now if sweeping else math.inf
        won: list[Won] = []

        def send(item: Won) -> bool:
            won.append(item)  # run after the step, as the scheduler's threads start after it
            return True

        step = loop.step(send)
        if not step.healthy:  # the loop backs off on fake time, like a live instance
            self._retry_at = now + step.next_in
            return
        while sweeping and self._sweeps and self._sweeps[0] <= now:
            heapq.heappop(self._sweeps)
        for item in won:
            self._run(item, now)

    def _run(self, won: Won, now: float) -> None:
        handler = won.job.handler
        assert handler is not None
        heartbeat, lease = self.scheduler.heartbeat, self.scheduler.lease
        try:
            active = self.runner.begin(won.run, max_attempts=won.job.max_attempts)
        except NotAcknowledged:  # not started, and handed back: the next sweep leases it
            heapq.heappush(self._sweeps, now + heartbeat)
            return
        except BackendUnavailable:  # not started: handed back at the next sweep, as live
            self.scheduler.decider.release_at_next_sweep(won.run)
            heapq.heappush(self._sweeps, now + heartbeat)
            return
        if active is None:
            return
        try:
            active.call(lambda run: call_handler(handler, run))
        except SimulatedCrash:
            active.abandon()
            heapq.heappush(self._sweeps, now + lease + heartbeat)
            return
        heapq.heappush(self._sweeps, now + heartbeat)
