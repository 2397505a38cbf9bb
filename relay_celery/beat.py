"""``RelayScheduler``: a Celery beat scheduler that any number of beats can run side by side.

Each ``beat_schedule`` entry becomes a Relay job. Every tick, the beat steps the core's
:class:`~relay.engine.Loop`, which decides the runs, and publishes exactly those it won, with the
run in a message header; a beat that loses publishes nothing. The scheduler holds no rule of its
own and reports nothing itself: the engine emits the events, on :data:`relay_celery.events.bus`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any, cast

from celery import Celery
from celery.beat import BeatLazyFunc, ScheduleEntry, Scheduler

from relay import clock as relay_clock
from relay.backends import LEASE_BACKENDS, Backend
from relay.engine import Decider, Loop, Won
from relay.engine.stored import ScheduleFeed
from relay.engine.waiting import wait_for_store
from relay.errors import ConfigurationError, UnsupportedOption
from relay.jobs import Job, make_job
from relay.runs import HEADER
from relay.schedule_store import stores_schedules
from relay.scheduler import default_owner
from relay.stored import Schedule as StoredSchedule
from relay.tracing import message_headers
from relay_celery.config import load_settings, open_checked
from relay_celery.consumer import ConsumerMode, consumer_backend
from relay_celery.entries import RELAY_OPTIONS, entry_options, jobs_options
from relay_celery.events import bus
from relay_celery.schedules import schedule_options
from relay_celery.stored import StoredTask, allowed_tasks, stored_task
from relay_celery.worker import check_scheduled_tasks, require_worker_hooks

__all__ = ["RELAY_OPTIONS", "RelayScheduler"]

log = logging.getLogger("relay.celery.beat")
_never = threading.Event()
"""Beat waits for its store until it answers: Celery's signal handlers stop it by raising."""

STORED_TICK = 1.0
"""The longest wait between two steps of a beat that runs stored schedules: each step asks the
store for changes (one indexed read), so a change is applied within a second plus a round trip,
as on the standalone scheduler's default tick."""


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
        self._consumer: ConsumerMode | None = None
        self.allowed: tuple[str, ...] = ()
        """The tasks stored schedules may run here (:func:`relay_celery.schedulable`)."""
        self._next_wake = 0.0
        super().__init__(app, *args, **kwargs)

    # -- set-up ------------------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Read the entries, open the backend, make one Relay job per entry, and apply the
        stored schedules of the allowed tasks (refused: a stored schedule named as an entry).

        A store that cannot be reached yet is waited for here: beat publishes nothing and
        records no heartbeat until it answers, reporting ``store_waiting`` every 30 s."""
        super().setup_schedule()
        require_worker_hooks(self.app)
        self._relay_options = jobs_options(
            self.app.conf.get("relay_jobs"), self._relay_options, self.schedule
        )
        loaded = load_settings(self.app)
        self.allowed = allowed_tasks(self.app, loaded)
        backend, settings = open_checked(loaded)
        self._backend, self.settings = backend, settings
        try:
            # What the worker refuses at start, beat refuses too: it would publish runs for it.
            check_scheduled_tasks(self.app, self.allowed, settings.capability)
            self.decider = Decider(
                backend, owner=default_owner(), lease=settings.queue_lease, events=bus
            )
            for name, entry in self.schedule.items():
                self.decider.add(self._job(name, entry))
            consumer = consumer_backend(backend)
            if consumer is not None:  # RabbitMQ consumer mode: runs go to their jobs' queues
                consumer.check_jobs(list(self.decider.jobs.values()))
                self._consumer = ConsumerMode(self.app, consumer)
            feed = self._feed()
            interval = self._max_interval()
            if feed is not None and feed.active:  # changes seen within a tick, as elsewhere
                interval = min(interval, STORED_TICK)
            self.loop = Loop(
                self.decider, interval=interval, sweep_every=settings.heartbeat, role="beat",
                schedules=feed,
            )  # fmt: skip
            if self.loop.instance is not None:  # add_schedule checks a task against these
                self.loop.instance.info = replace(self.loop.instance.info, tasks=self.allowed)
            # A store down at start is waited for (SIGTERM / SIGINT still stop beat meanwhile).
            wait_for_store(backend, owner=self.decider.owner, events=bus, stopping=_never)
            self._start_feed(feed)
        except Exception:
            backend.close()
            raise
        log.info(
            "beat %s deciding %d job(s) on %s", self.decider.owner, len(self.schedule), backend.name
        )

    def _feed(self) -> ScheduleFeed | None:
        """Stored schedules, read only when some task is allowed (a code job's name clashing
        with one is refused all the same, at start)."""
        backend = self.decider.backend
        if not stores_schedules(backend):
            if self.allowed:
                raise UnsupportedOption("relay_schedulable_tasks", backend.name, LEASE_BACKENDS)
            return None
        if self.allowed and self._consumer is not None:
            raise ConfigurationError(
                "stored schedules are not run in RabbitMQ consumer mode (mode=consumer): remove "
                "relay_schedulable_tasks and relay_celery.schedulable(), or use another mode"
            )
        for name in self.allowed:
            if name not in self.app.tasks:
                log.warning("relay: schedulable task %r is not registered in beat's app", name)
        return ScheduleFeed(
            self.decider, backend, self._stored_task, allowed=", ".join(self.allowed),
            active=bool(self.allowed), allow_with="relay_celery.schedulable",
        )  # fmt: skip

    def _start_feed(self, feed: ScheduleFeed | None) -> None:
        if feed is not None:
            feed.start_when_reachable()

    def _stored_task(self, schedule: StoredSchedule) -> StoredTask | None:
        """What a stored schedule's run publishes, if its task is allowed here."""
        if schedule.task not in self.allowed:
            return None
        return stored_task(schedule, self._send, self.app.tasks.get(schedule.task))

    def merge_inplace(self, b: dict[str, Any]) -> None:
        """Keep each entry's ``"relay"`` options aside; Celery's entries do not know the key."""
        entries = {}
        for name, values in b.items():
            values = dict(values)
            options = entry_options(name, values.pop("relay", None))
            if options:
                self._relay_options[name] = options
            else:  # most entries have none: no empty dict kept per entry
                self._relay_options.pop(name, None)
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
        """Step the engine's loop when it asked to be; return the seconds to sleep until then."""
        now = relay_clock.monotonic()
        if now < self._next_wake:
            return min(self._next_wake - now, self._max_interval())
        step = self.loop.step(self._publish)
        self._next_wake = relay_clock.monotonic() + step.next_in
        # 0: Celery calls tick() again at once, which then sleeps until the loop's next step.
        return 0.0 if step.healthy else step.next_in

    def _max_interval(self) -> float:
        return float(self.max_interval or 300)

    # -- publishing --------------------------------------------------------------------------

    def _publish(self, won: Won) -> bool:
        """Send the entry's task with the run in its headers (the loop hands it back on error).

        A stored schedule's run sends its task with the arguments and options it was won with.
        """
        stored = won.job.handler
        if isinstance(stored, StoredTask):
            stored(won)
            return True
        entry = self.schedule[won.job.name]
        args = tuple(a() if isinstance(a, BeatLazyFunc) else a for a in entry.args or ())
        kwargs = {
            k: v() if isinstance(v, BeatLazyFunc) else v for k, v in (entry.kwargs or {}).items()
        }
        self._send(won, entry.task or "", args, kwargs, dict(entry.options or {}))
        return True

    def _send(
        self, won: Won, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
        options: dict[str, Any],
    ) -> None:  # fmt: skip
        headers = dict(options.pop("headers", None) or {})
        run, producer = won.run, self.producer
        if self._consumer is not None:  # RabbitMQ consumer mode: to the job's own run queue
            run, route = self._consumer.route(won)
            producer = route.pop("producer")
            options.update(route)
        run_header = message_headers(run, max_attempts=won.job.max_attempts)
        headers.update({HEADER: run_header, "celery_beat_task": True})
        task = self.app.tasks.get(name)
        send = task.apply_async if task is not None else self._send_task(name)
        send(args, kwargs, producer=producer, headers=headers, **options)

    def _send_task(self, name: str) -> Any:
        return lambda *args, **kwargs: self.app.send_task(name, *args, **kwargs)

    # -- the rest of Celery's scheduler interface -------------------------------------------

    def close(self) -> None:
        """Close the backend and the publishing connection."""
        try:
            super().close()
        finally:
            if self._consumer is not None:
                self._consumer.close()
            if self._backend is not None:
                self._backend.close()

    @property
    def info(self) -> str:
        """One line for ``celery beat``'s banner."""
        backend = self._backend
        return f"relay backend: {backend.name}" if backend is not None else "relay"
