"""Watching expectations: the engine announces a job turning overdue, failing or recovered.

Each loop's :class:`Watch` decides its jobs' standing from the store (:mod:`relay.overdue`) every
``every`` seconds, when the soonest expectation passes, and soon after a run of its own ended, and
compares it with what it saw last. A change is announced with
:class:`~relay.events.JobOverdue`, :class:`~relay.events.JobFailing` or
:class:`~relay.events.JobRecovered`, and so logged, once across the fleet: the instance that
announces it first marks the change's id in the store (:class:`~relay.contract.MarksOnce`); the
others see the mark and stay quiet. The id names the job, the kind and the slot (overdue and
failing: the oldest slot not yet succeeded; recovered: the success), so every instance derives it.

An instance that starts while a job is overdue announces it unless another one did. Recovery is
announced by the instances that saw the job alerting. A store without marks (NATS KV) announces
from each instance that sees the change.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from relay import clock as relay_clock
from relay.contract import LeaseBackend, marks_once
from relay.errors import RelayError
from relay.events import (
    EventBus,
    JobFailing,
    JobOverdue,
    JobRecovered,
    RunExhausted,
    RunFailed,
    RunSkipped,
    RunsMissed,
    RunSucceeded,
)
from relay.overdue import JobHealth, read_health
from relay.runs import format_slot

__all__ = ["DEFAULT_EVERY", "MARK_TTL", "Announcement", "Watch"]

log = logging.getLogger("relay.engine")

DEFAULT_EVERY = 60.0
"""Seconds between two checks of an instance's jobs."""
MARK_TTL = 30 * 24 * 3600.0
"""Seconds the store keeps the mark of an announcement."""
SHARE = 20.0
"""A check that took ``t`` seconds is followed by the next one ``SHARE * t`` seconds later at the
soonest: the loop spends at most a twentieth of its time checking (100,000 jobs)."""
MIN_GAP = 5.0
"""Seconds at least between two checks that runs ending here asked for."""
_OUTCOMES = (RunSucceeded, RunFailed, RunExhausted, RunSkipped, RunsMissed)


Announcement = JobOverdue | JobFailing | JobRecovered
"""What a :class:`Watch` announces."""


class Watch:
    """Checks ``jobs()``'s standing every ``every`` seconds and announces changes once."""

    def __init__(
        self,
        backend: LeaseBackend,
        jobs: Callable[[], list[str]],
        events: EventBus,
        owner: str,
        *,
        every: float = DEFAULT_EVERY,
        monotonic: Callable[[], float] = relay_clock.monotonic,
    ) -> None:
        self.backend = backend
        self.jobs = jobs
        self.events = events
        self.owner = owner
        self.every = every
        self.monotonic = monotonic
        self.next_check = 0.0
        """When (on ``monotonic``) the next check is due."""
        self.wake_at = math.inf
        """When (on ``monotonic``) the soonest expectation of a job not overdue passes: a check
        is due then too, however recent the last one."""
        self._seen: dict[str, JobHealth] = {}
        self._checked = -math.inf
        for kind in _OUTCOMES:
            events.on(kind, self._outcome)

    def _outcome(self, event: object) -> None:
        """A run of ours ended: check soon (at most every :data:`MIN_GAP` seconds)."""
        self.wake_at = min(self.wake_at, max(self.monotonic(), self._checked + MIN_GAP))

    def due_in(self) -> float:
        """Seconds until the next check is due."""
        return max(0.0, min(self.next_check, self.wake_at) - self.monotonic())

    def maybe_check(self) -> None:
        """Check now if ``every`` has passed since the last check, or an expectation passed.
        Never raises."""
        now = self.monotonic()
        if now < self.next_check and now < self.wake_at:
            return
        self.next_check = now + self.every
        self.wake_at = math.inf
        self._checked = now
        try:
            self.check()
        except Exception as exc:  # a loop never dies of a check; the next one tries again
            log.warning("could not check the jobs' expectations of %s: %s", self.owner, exc)
        # A check of many jobs takes the loop's time: keep it to a twentieth of it.
        took = self.monotonic() - now
        self.next_check = max(self.next_check, now + SHARE * took)
        self.wake_at = max(self.wake_at, now + SHARE * took) if took else self.wake_at

    def check(self) -> list[Announcement]:
        """Decide the jobs' standing now and announce what changed; return the announcements."""
        names = self.jobs()
        if not names:
            return []
        announced: list[Announcement] = []
        started = self.monotonic()
        for health in read_health(self.backend, names, strict=False):
            if health.expected_by is not None and not health.overdue:
                wait = (health.expected_by - health.now).total_seconds() + 0.001
                self.wake_at = min(self.wake_at, started + max(wait, 0.0))
            for event in self._changes(self._seen.get(health.job), health):
                if self._first(event):
                    self.events.emit(event)
                    announced.append(event)
            self._seen[health.job] = health
        return announced

    def _changes(self, before: JobHealth | None, now: JobHealth) -> list[Announcement]:
        found: list[Announcement] = []
        was_overdue = before is not None and before.overdue
        was_failing = before is not None and before.failing
        if now.overdue and not was_overdue and now.slot and now.expected_by:
            found.append(
                JobOverdue(
                    now.job, now.slot, now.outcome or "no record", now.expected_by,
                    now.last_success, self.owner,
                )
            )  # fmt: skip
        if now.failing and not was_failing and now.slot:
            found.append(JobFailing(now.job, now.slot, now.failures, now.last_success, self.owner))
        if (was_overdue or was_failing) and now.state == "ok" and now.last_success_slot:
            was = "overdue" if was_overdue else "failing"
            found.append(
                JobRecovered(now.job, now.last_success_slot, was, now.last_success, self.owner)
            )
        return found

    def _first(self, event: Announcement) -> bool:
        """Whether this instance is the first to announce ``event`` (marked in the store)."""
        if not marks_once(self.backend):
            return True
        key = f"{event.job}|{event.type}|{format_slot(event.slot)}"
        try:
            return self.backend.mark_once(key, MARK_TTL)
        except RelayError as exc:  # better twice than never: announce it unmarked
            log.warning("could not mark %s in the store (%s); announcing it all the same", key, exc)
            return True
