"""The deciding half for Dramatiq: tick, sweep, and enqueue each won run as a message.

Any number of scheduler processes may run: each run is won by one of them, and only the winner
enqueues it. The run travels in the message's ``relay_run`` option with its fencing token. On a
lease backend each loop also applies the store's stored schedules of its schedulable actors
(:class:`~relay.engine.stored.ScheduleFeed`), whose runs are enqueued the same way.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import FrameType
from typing import Any

import dramatiq

from relay import clock as relay_clock
from relay.durations import Duration
from relay.engine import Decider, Loop, Step, Won
from relay.engine.stored import ScheduleFeed
from relay.engine.waiting import wait_for_store
from relay.errors import ConfigurationError
from relay.jobs import check_tick
from relay.runs import HEADER
from relay.schedule_store import stores_schedules
from relay.stored import Schedule
from relay.tracing import message_headers
from relay_dramatiq._consumer import check_queues, dispatcher
from relay_dramatiq._middleware import RelayMiddleware
from relay_dramatiq._periodic import Periodic, require_worker_side
from relay_dramatiq._stored import ALLOW_WITH, StoredMessage, check_schedulable, stored_message

__all__ = ["Scheduler"]

log = logging.getLogger("relay.dramatiq.scheduler")


class _Group:
    """The periodic and schedulable actors of one middleware (one backend), decided together by
    one loop."""

    def __init__(
        self, middleware: RelayMiddleware[Any], tick: float, clock: Callable[[], float]
    ) -> None:
        self.middleware = middleware
        decider = Decider(
            middleware.backend, owner=middleware.owner, lease=middleware.queue_lease, clock=clock,
            events=middleware.events,
        )  # fmt: skip
        self.feed = (
            ScheduleFeed(
                decider, middleware.backend, self._stored_message, active=False,
                allow_with=ALLOW_WITH,
            )
            if stores_schedules(middleware.backend)
            else None
        )  # fmt: skip
        self.loop = Loop(
            decider, interval=tick, sweep_every=middleware.heartbeat, role="dramatiq-scheduler",
            schedules=self.feed,
        )  # fmt: skip
        self.actors: dict[str, Periodic] = {}
        self.allowed: dict[str, dramatiq.Actor[Any, Any]] = {}
        """The actors stored schedules may run, by name."""

    def add(self, item: Periodic) -> None:
        self.loop.decider.add(item.job)
        self.actors[item.job.name] = item

    def allow(self, actor: dramatiq.Actor[Any, Any]) -> None:
        """Let stored schedules run ``actor``; the heartbeat records it for ``add_schedule``."""
        known = self.allowed.setdefault(actor.actor_name, actor)
        if known is not actor:
            raise ConfigurationError(
                f"two schedulable actors are named {actor.actor_name!r}: give each its own name"
            )
        assert self.feed is not None  # check_schedulable refused a store that keeps none
        self.feed.allowed = ", ".join(sorted(self.allowed))
        self.feed.active = True
        if self.loop.instance is not None:
            self.loop.instance.info = replace(
                self.loop.instance.info, tasks=tuple(sorted(self.allowed))
            )

    def start(self, stopping: threading.Event) -> bool:
        """Wait for the store, then apply the stored schedules (refused: a periodic actor that
        has a stored schedule's name); ``False`` if ``stopping`` was set first."""
        decider = self.loop.decider
        if not wait_for_store(
            decider.backend, owner=decider.owner, events=decider.events, stopping=stopping
        ):
            return False
        if self.feed is not None:
            self.feed.start_when_reachable()
        return True

    def step(self) -> Step:
        """One step of the loop; each won run is enqueued."""
        return self.loop.step(self._enqueue)

    def _stored_message(self, schedule: Schedule) -> StoredMessage | None:
        actor = self.allowed.get(schedule.task)
        if actor is None:
            return None
        return stored_message(actor, schedule, self.middleware.queue_lease)

    def _enqueue(self, won: Won) -> bool:
        consumer = dispatcher(self.middleware.backend)
        if consumer is not None:  # RabbitMQ consumer mode: the job's run queue, not Dramatiq's
            consumer.dispatch(won)
            return True
        header = message_headers(won.run, max_attempts=won.job.max_attempts)
        if isinstance(won.job.handler, StoredMessage):  # a stored schedule's run
            won.job.handler.send(header)
            return True
        actor = self.actors[won.job.name].actor
        # max_retries=0: Relay retries a failed run itself, with a new token.
        options: dict[str, Any] = {HEADER: header, "max_retries": 0}
        actor.send_with_options(**options)
        return True


class Scheduler:
    """Decides the runs of periodic actors and stored schedules; enqueues those this process wins.

    ``periodics`` usually comes from :func:`relay_dramatiq.periodic_actors` after importing the
    app; each one's middleware must be on its actor's broker since before the actor was declared
    (so workers have it too), else :class:`~relay.errors.ConfigurationError`. ``schedulable``
    (usually :func:`relay_dramatiq.schedulable_actors`) are the actors stored schedules may run,
    checked as :func:`relay_dramatiq.schedulable` does; the scheduler then reads its store's
    stored schedules each tick and records the actors' names in its heartbeat. ``tick`` defaults
    to the middleware's. ``clock`` exists for tests.
    """

    def __init__(
        self,
        periodics: Iterable[Periodic],
        *,
        schedulable: Iterable[dramatiq.Actor[Any, Any]] = (),
        tick: Duration | None = None,
        clock: Callable[[], float] = relay_clock.time,
    ) -> None:
        items = list(periodics)
        allowed = [(actor, check_schedulable(actor)) for actor in schedulable]
        if not items and not allowed:
            raise ConfigurationError(
                "no periodic actors: decorate actors with @periodic(...), or allow actors for "
                "stored schedules with @relay_dramatiq.schedulable"
            )
        middlewares = [item.middleware for item in items] + [m for _, m in allowed]
        self.tick = check_tick(tick, default=min(m.tick for m in middlewares))
        self._groups: dict[int, _Group] = {}
        for middleware in middlewares:
            if id(middleware) not in self._groups:
                self._groups[id(middleware)] = _Group(middleware, self.tick, clock)
        for item in items:
            require_worker_side(item.actor, item.middleware)
            self._groups[id(item.middleware)].add(item)
        for actor, middleware in allowed:
            self._groups[id(middleware)].allow(actor)
        for group in self._groups.values():
            check_queues(group.middleware.backend, list(group.loop.decider.jobs.values()))
        self._stopping = threading.Event()
        self._started = False

    def start(self) -> bool:
        """Wait for each store to answer (``store_waiting`` is reported every 30 s meanwhile),
        then apply the stored schedules before the first tick (:meth:`run` calls it); a periodic
        actor with a stored schedule's name refuses to start (``ConfigurationError``).
        ``False`` if :meth:`stop` was called before every store answered."""
        if not self._started:
            self._started = all(group.start(self._stopping) for group in self._groups.values())
        return self._started

    def run(self) -> None:
        """:meth:`start` (unless called already), then tick until :meth:`stop` (or SIGTERM /
        SIGINT)."""
        restore = _install_signal_handlers(self.stop)
        try:
            if not self.start():
                return
            log.info(
                "deciding %d periodic actor(s), and stored schedules of %d schedulable actor(s)",
                sum(len(g.actors) for g in self._groups.values()),
                sum(len(g.allowed) for g in self._groups.values()),
            )
            while not self._stopping.is_set():
                self._stopping.wait(self.step())
        finally:
            restore()
            log.info("stopped")

    def stop(self) -> None:
        """Ask :meth:`run` to return; safe from any thread or signal handler."""
        self._stopping.set()

    def step(self) -> float:
        """One step of every group's loop; the seconds until the next one is useful."""
        return min(group.step().next_in for group in self._groups.values())

    def run_pending(self) -> bool:
        """One step of every group's loop; ``False`` if a store could not answer."""
        return all([group.step().healthy for group in self._groups.values()])


def _install_signal_handlers(stop: Callable[[], None]) -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
