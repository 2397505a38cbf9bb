"""The deciding half for Dramatiq: tick, sweep, and enqueue each won run as a message.

Any number of scheduler processes may run: each run is won by one of them, and only the winner
enqueues it. The run travels in the message's ``relay_run`` option with its fencing token.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from relay.contract import is_lease
from relay.durations import Duration
from relay.engine import Decider, Runner, Won
from relay.errors import BackendUnavailable, ConfigurationError, RelayError
from relay.jobs import check_tick
from relay.runs import HEADER, run_to_headers
from relay_dramatiq._consumer import check_queues, dispatcher
from relay_dramatiq._middleware import RelayMiddleware
from relay_dramatiq._periodic import Periodic, require_worker_side

__all__ = ["Scheduler"]

log = logging.getLogger("relay.dramatiq.scheduler")
MAX_BACKOFF = 30.0


class _Group:
    """The periodic actors of one middleware (one backend), decided together."""

    def __init__(self, middleware: RelayMiddleware[Any], clock: Callable[[], float]) -> None:
        self.middleware = middleware
        self.decider = Decider(
            middleware.backend, owner=middleware.owner, lease=middleware.queue_lease, clock=clock
        )
        self.runner = Runner(
            middleware.backend,
            owner=middleware.owner,
            lease=middleware.queue_lease,
            heartbeat=middleware.heartbeat,
        )
        self.actors: dict[str, Periodic] = {}
        self.next_sweep = 0.0

    def add(self, item: Periodic) -> None:
        self.decider.add(item.job)
        self.actors[item.job.name] = item

    def decide(self) -> list[Won]:
        """Newly due runs, plus (every heartbeat) runs to take over."""
        won = self.decider.tick()
        if is_lease(self.middleware.backend) and time.monotonic() >= self.next_sweep:
            won += self.decider.sweep()
            self.next_sweep = time.monotonic() + self.middleware.heartbeat
        return won


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._groups: dict[int, _Group] = {}
        for item in periodics:
            require_worker_side(item.actor, item.middleware)
            key = id(item.middleware)
            if key not in self._groups:
                self._groups[key] = _Group(item.middleware, clock)
            self._groups[key].add(item)
        if not self._groups:
            raise ConfigurationError("no periodic actors: decorate actors with @periodic(...)")
        for group in self._groups.values():
            check_queues(group.middleware, list(group.decider.jobs.values()))
        ticks = [group.middleware.tick for group in self._groups.values()]
        self.tick = check_tick(tick, default=min(ticks))
        self._stopping = threading.Event()

    def run(self) -> None:
        """Tick until :meth:`stop` (or SIGTERM / SIGINT)."""
        restore = _install_signal_handlers(self.stop)
        log.info("deciding %d periodic actor(s)", sum(len(g.actors) for g in self._groups.values()))
        backoff = self.tick
        try:
            while not self._stopping.is_set():
                if self.run_pending():
                    backoff = self.tick
                    self._stopping.wait(self.tick)
                else:
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
        finally:
            restore()
            log.info("stopped")

    def stop(self) -> None:
        """Ask :meth:`run` to return; safe from any thread or signal handler."""
        self._stopping.set()

    def run_pending(self) -> bool:
        """One tick for every group; ``False`` if a store could not answer."""
        healthy = True
        for group in self._groups.values():
            try:
                won = group.decide()
            except BackendUnavailable as exc:
                log.error("%s; retrying", exc)
                group.decider.forget_progress()
                healthy = False
                continue
            for item in won:
                self._dispatch(group, item)
        return healthy

    def _dispatch(self, group: _Group, won: Won) -> None:
        consumer = dispatcher(group.middleware)
        if consumer is not None:  # RabbitMQ consumer mode: the job's run queue, not Dramatiq's
            try:
                consumer.dispatch(won)
            except RelayError:
                log.exception("could not publish %s: the run is lost", won.run.id)
            return
        actor = group.actors[won.job.name].actor
        # max_retries=0: Relay retries a failed run itself, with a new token.
        options: dict[str, Any] = {HEADER: run_to_headers(won.run), "max_retries": 0}
        try:
            actor.send_with_options(**options)
        except Exception:
            log.exception("could not enqueue %s; handing it over", won.run.id)
            group.runner.release(won.run)
            return
        log.info("enqueued %s (attempt %d, token %d)", won.run.id, won.run.attempt, won.run.token)


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
