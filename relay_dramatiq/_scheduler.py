"""The deciding half for Dramatiq: tick, sweep, and enqueue each won run as a message.

Any number of scheduler processes may run: each run is won by one of them, and only the winner
enqueues it. The run travels in the message's ``relay_run`` option with its fencing token.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from relay import clock as relay_clock
from relay.durations import Duration
from relay.engine import Decider, Loop, Step, Won
from relay.errors import ConfigurationError
from relay.jobs import check_tick
from relay.runs import HEADER
from relay.tracing import message_headers
from relay_dramatiq._consumer import check_queues, dispatcher
from relay_dramatiq._middleware import RelayMiddleware
from relay_dramatiq._periodic import Periodic, require_worker_side

__all__ = ["Scheduler"]

log = logging.getLogger("relay.dramatiq.scheduler")


class _Group:
    """The periodic actors of one middleware (one backend), decided together by one loop."""

    def __init__(
        self, middleware: RelayMiddleware[Any], tick: float, clock: Callable[[], float]
    ) -> None:
        self.middleware = middleware
        decider = Decider(
            middleware.backend, owner=middleware.owner, lease=middleware.queue_lease, clock=clock,
            events=middleware.events,
        )  # fmt: skip
        self.loop = Loop(
            decider, interval=tick, sweep_every=middleware.heartbeat, role="dramatiq-scheduler"
        )
        self.actors: dict[str, Periodic] = {}

    def add(self, item: Periodic) -> None:
        self.loop.decider.add(item.job)
        self.actors[item.job.name] = item

    def step(self) -> Step:
        """One step of the loop; each won run is enqueued."""
        return self.loop.step(self._enqueue)

    def _enqueue(self, won: Won) -> bool:
        consumer = dispatcher(self.middleware.backend)
        if consumer is not None:  # RabbitMQ consumer mode: the job's run queue, not Dramatiq's
            consumer.dispatch(won)
            return True
        actor = self.actors[won.job.name].actor
        header = message_headers(won.run, max_attempts=won.job.max_attempts)
        # max_retries=0: Relay retries a failed run itself, with a new token.
        options: dict[str, Any] = {HEADER: header, "max_retries": 0}
        actor.send_with_options(**options)
        return True


class Scheduler:
    """Decides the runs of periodic actors and enqueues those this process wins.

    ``periodics`` usually comes from :func:`relay_dramatiq.periodic_actors` after importing the
    app; each one's middleware must be on its actor's broker since before the actor was declared
    (so workers have it too), else :class:`~relay.errors.ConfigurationError`. ``tick`` defaults to
    the middleware's. ``clock`` exists for tests.
    """

    def __init__(
        self,
        periodics: Iterable[Periodic],
        *,
        tick: Duration | None = None,
        clock: Callable[[], float] = relay_clock.time,
    ) -> None:
        items = list(periodics)
        if not items:
            raise ConfigurationError("no periodic actors: decorate actors with @periodic(...)")
        self.tick = check_tick(tick, default=min(item.middleware.tick for item in items))
        self._groups: dict[int, _Group] = {}
        for item in items:
            require_worker_side(item.actor, item.middleware)
            key = id(item.middleware)
            if key not in self._groups:
                self._groups[key] = _Group(item.middleware, self.tick, clock)
            self._groups[key].add(item)
        for group in self._groups.values():
            check_queues(group.middleware.backend, list(group.loop.decider.jobs.values()))
        self._stopping = threading.Event()

    def run(self) -> None:
        """Tick until :meth:`stop` (or SIGTERM / SIGINT)."""
        restore = _install_signal_handlers(self.stop)
        log.info("deciding %d periodic actor(s)", sum(len(g.actors) for g in self._groups.values()))
        try:
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
