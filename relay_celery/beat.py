"""``RelayScheduler``: a Celery beat scheduler that any number of beats can run side by side.

Each ``beat_schedule`` entry becomes a Relay job. Every tick, the beat asks the core's
:class:`~relay.engine.Decider` which runs it won and publishes exactly those, with the run in a
message header; a beat that loses publishes nothing. The scheduler holds no rule of its own.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any, cast

from celery import Celery
from celery.beat import BeatLazyFunc, ScheduleEntry, Scheduler

from relay.backends import Backend
from relay.contract import is_lease
from relay.engine import Decider, Runner, Won
from relay.errors import ConfigurationError
from relay.jobs import Job, make_job
from relay.runs import HEADER, run_to_headers
from relay.scheduler import default_owner
from relay_celery.config import load_settings, open_checked
from relay_celery.entries import RELAY_OPTIONS, entry_options, jobs_options
from relay_celery.schedules import schedule_options
from relay_celery.worker import require_worker_hooks

__all__ = ["RELAY_OPTIONS", "RelayScheduler"]

log = logging.getLogger("relay.celery.beat")

MAX_BACKOFF = 30.0


class RelayScheduler(Scheduler):
    """Publishes each run of each ``beat_schedule`` entry once, from whichever beat wins it.

    Choose it with ``celery -A proj beat -S relay_celery.RelayScheduler`` or
    ``app.conf.beat_scheduler = "relay_celery.RelayScheduler"``. Settings come from
    ``app.conf.relay_*`` (or Django's ``RELAY``); an entry's Relay options from
    ``app.conf.relay_jobs[entry]`` (or its ``"relay"`` key). It refuses to start for an app
    without :func:`relay_celery.install`: its workers would not lease the runs it publishes.
    """

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        self._relay_options: dict[str, dict[str, Any]] = {}
        self._backend: Backend | None = None
        self._next_wake = 0.0
        self._next_sweep = 0.0
        self._backoff = 1.0
        super().__init__(app, *args, **kwargs)

    # -- set-up ------------------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Read the entries, open the backend and make one Relay job per entry."""
        super().setup_schedule()
        require_worker_hooks(self.app)
        self._relay_options = jobs_options(
            self.app.conf.get("relay_jobs"), self._relay_options, self.schedule
        )
        backend, settings = open_checked(load_settings(self.app))
        self._backend, self.settings = backend, settings
        try:
            self.decider = Decider(backend, owner=default_owner(), lease=settings.queue_lease)
            for name, entry in self.schedule.items():
                self.decider.add(self._job(name, entry))
        except Exception:
            backend.close()
            raise
        # Only used to hand back a run that could not be published.
        self.runner = Runner(
            backend, owner=self.decider.owner, lease=settings.lease, heartbeat=settings.heartbeat
        )
        log.info(
            "beat %s deciding %d job(s) on %s", self.decider.owner, len(self.schedule), backend.name
        )

    def merge_inplace(self, b: dict[str, Any]) -> None:
        """Keep each entry's ``"relay"`` options aside; Celery's entries do not know the key."""
        entries = {}
        for name, values in b.items():
            values = dict(values)
            self._relay_options[name] = entry_options(name, values.pop("relay", None))
            entries[name] = values
        super().merge_inplace(cast("dict[str, Any]", entries))

    def _job(self, name: str, entry: ScheduleEntry) -> Job:
        assert self._backend is not None
        options = schedule_options(name, entry.schedule, self.app.timezone)
        try:
            return make_job(
                self._backend, name=name, **options, **self._relay_options.get(name, {})
            )
        except ConfigurationError as exc:
            if not str(exc).startswith("beat_schedule entry"):
                exc.args = (f"beat_schedule entry {name!r}: {exc}",)
            raise

    # -- the loop ----------------------------------------------------------------------------

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Decide and publish what is due; return the seconds to sleep until something may be."""
        now = time.monotonic()
        wake = min(self._next_wake, self._next_sweep if self._sweeps() else self._next_wake)
        if now < wake:
            return min(wake - now, self._max_interval())
        try:
            won = self._decide(now)
        except Exception as exc:
            log.error("beat could not decide runs (%s); retrying in %.0fs", exc, self._backoff)
            self.decider.forget_progress()
            delay, self._backoff = self._backoff, min(self._backoff * 2, MAX_BACKOFF)
            self._next_wake = time.monotonic() + delay
            return delay
        self._backoff = 1.0
        for item in won:
            self._publish(item)
        self._next_wake = time.monotonic() + self._until_next_slot()
        return 0.0

    def _decide(self, now: float) -> list[Won]:
        won = self.decider.tick()
        if self._sweeps() and now >= self._next_sweep:
            won += self.decider.sweep()
            self._next_sweep = now + self.settings.heartbeat
        return won

    def _sweeps(self) -> bool:
        return self._backend is not None and is_lease(self._backend)

    def _until_next_slot(self) -> float:
        """Seconds until the earliest next slot of any job (at most ``max_interval``).

        The decider keeps its jobs' next slots in a queue: reading the earliest costs nothing.
        """
        soonest = self.decider.next_due()
        if soonest is None:
            return self._max_interval()
        seconds = (soonest - datetime.now(timezone.utc)).total_seconds() + 0.001
        return max(min(seconds, self._max_interval()), 0.0)

    def _max_interval(self) -> float:
        return float(self.max_interval or 300)

    # -- publishing --------------------------------------------------------------------------

    def _publish(self, won: Won) -> None:
        """Send the entry's task with the run in its headers; hand the run back if that fails."""
        entry = self.schedule[won.job.name]
        options = dict(entry.options or {})
        headers = dict(options.pop("headers", None) or {})
        headers.update({HEADER: run_to_headers(won.run), "celery_beat_task": True})
        args = tuple(a() if isinstance(a, BeatLazyFunc) else a for a in entry.args or ())
        kwargs = {
            k: v() if isinstance(v, BeatLazyFunc) else v for k, v in (entry.kwargs or {}).items()
        }
        log.info("publishing %s (%s, token %d)", won.run.id, entry.task, won.run.token)
        try:
            task = self.app.tasks.get(entry.task or "")
            send = task.apply_async if task is not None else self._send_task(entry.task)
            send(args, kwargs, producer=self.producer, headers=headers, **options)
        except Exception:
            log.exception("could not publish %s; handing it back", won.run.id)
            self.runner.release(won.run)

    def _send_task(self, name: str | None) -> Any:
        return lambda *args, **kwargs: self.app.send_task(name or "", *args, **kwargs)

    # -- the rest of Celery's scheduler interface -------------------------------------------

    def close(self) -> None:
        """Close the backend and the publishing connection."""
        try:
            super().close()
        finally:
            if self._backend is not None:
                self._backend.close()

    @property
    def info(self) -> str:
        """One line for ``celery beat``'s banner."""
        backend = self._backend
        return f"relay backend: {backend.name}" if backend is not None else "relay"
