"""The worker half: a Dramatiq middleware that runs each run message through Relay's runner.

Before a run message is processed it starts the run with its token (``Runner.begin``); a stale
token, a finished run or a run another worker holds is skipped. While the actor runs, the run
heartbeats; afterwards it is finished as succeeded or failed. A worker that stops gracefully hands
its runs over. Every hook contains its own failures: a store that cannot confirm a run means the
run is skipped, never let through.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

from dramatiq.broker import Broker, MessageProxy
from dramatiq.middleware import Middleware, Shutdown, SkipMessage
from dramatiq.worker import Worker

from relay.backends import LEASE_BACKENDS, one_host_warning, open_backend
from relay.contract import ClaimBackend, LeaseBackend
from relay.durations import Duration, seconds
from relay.engine import ActiveRun, FinishLimit, HandBackLater, Renewals, Runner
from relay.engine import current_run as relay_current_run
from relay.engine.unacknowledged import what_becomes_of
from relay.errors import ConfigurationError, UnsupportedOption
from relay.events import Event, EventBus
from relay.health import InstanceHeartbeat
from relay.jobs import Job, check_scheduler_options, check_tick
from relay.runs import HEADER, Run
from relay.schedule_store import stores_schedules
from relay.scheduler import default_owner
from relay.settings import check_task_name
from relay.tracing import read_message
from relay_dramatiq import _consumer
from relay_dramatiq._coroutines import supervise_coroutine

__all__ = ["DEFAULT_QUEUE_LEASE", "RelayMiddleware", "current_run"]

log = logging.getLogger("relay.dramatiq")

BackendT = TypeVar("BackendT", ClaimBackend, LeaseBackend)
EventT = TypeVar("EventT", bound=Event)

DEFAULT_QUEUE_LEASE = 300.0
"""Seconds a scheduler's lease on an enqueued run lasts: the longest a run message may wait."""


def current_run() -> Run | None:
    """The run the current actor call performs, or ``None`` (not a run message, or no actor).

    The same as :func:`relay.current_run`. Set in the worker thread for the duration of the
    actor call: synchronous actors see it, and so do ``async def`` actors (Dramatiq's AsyncIO
    middleware runs them on its event loop thread in a copy of the worker thread's context).
    """
    return relay_current_run()


class RelayMiddleware(Middleware, Generic[BackendT]):
    """Runs Relay's run messages on a Dramatiq worker; also holds the settings of the scheduler.

    ``backend`` is a URL (``"sqlite:///relay.db"``) or a backend object (not closed by the
    middleware). On a lease backend, ``lease`` (default 30 s) is how long a started run stays
    ours without a heartbeat, ``heartbeat`` (default a third of the lease, at most 10 s) how often
    it is renewed, and ``queue_lease`` (default 300 s) how long the scheduler's lease on an
    enqueued run lasts: the longest a message may wait in the queue before the run is taken over.
    All three are refused on a claim backend. ``tick`` is how often ``relay-dramatiq`` looks for
    due runs. Add it where the broker is created, before any actor is declared: ``@periodic``
    refuses an actor declared before it, which workers could load without it. ``schedulable``
    names actors (by ``actor_name``) that stored schedules may run, like
    :func:`relay_dramatiq.schedulable` for actors declared elsewhere; ``relay-dramatiq`` looks
    them up on the broker at start (a lease backend only). A store that serves one host (SQLite)
    is logged as a warning.

    A URL's store is opened at its first use, not here: importing the app connects to nothing
    (RabbitMQ consumer mode excepted). A worker whose store is down starts, logs that it waits
    for it and records no heartbeat until it answers; ``relay-dramatiq`` waits for it before
    its first tick.
    """

    schedulable_source = "RelayMiddleware(schedulable=...)"
    """Where :attr:`schedulable` came from, in the errors about it."""

    @overload
    def __init__(
        self: RelayMiddleware[LeaseBackend],
        backend: LeaseBackend,
        *,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        queue_lease: Duration | None = None,
        tick: Duration | None = None,
        owner: str | None = None,
        schedulable: Iterable[str] = (),
    ) -> None: ...

    @overload
    def __init__(
        self: RelayMiddleware[ClaimBackend],
        backend: ClaimBackend,
        *,
        tick: Duration | None = None,
        owner: str | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: RelayMiddleware[Any],
        backend: str,
        *,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        queue_lease: Duration | None = None,
        tick: Duration | None = None,
        owner: str | None = None,
        schedulable: Iterable[str] = (),
    ) -> None: ...

    def __init__(
        self,
        backend: Any,
        *,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        queue_lease: Duration | None = None,
        tick: Duration | None = None,
        owner: str | None = None,
        schedulable: Iterable[str] = (),
    ) -> None:
        # Deferred: creating the middleware (importing the app) opens nothing, so a process
        # that only sends messages imports it with the store down; the first use opens it.
        self.backend: ClaimBackend | LeaseBackend = (
            open_backend(backend, deferred=True) if isinstance(backend, str) else backend
        )
        try:
            self.lease, self.heartbeat = check_scheduler_options(
                self.backend, lease=lease, heartbeat=heartbeat
            )
            self.queue_lease = _queue_lease(self.backend, queue_lease, self.lease)
            self.tick = check_tick(tick)
            self.schedulable = self._schedulable_names(schedulable)
            """Names of the actors stored schedules may run besides ``@schedulable`` ones."""
        except BaseException:
            if isinstance(backend, str):  # we opened it: do not leak its connections
                self.backend.close()
            raise
        self.owner = owner or default_owner()
        self.events = EventBus()
        """The events of this middleware's worker and scheduler; each is logged (see :meth:`on`)."""
        self.declared: set[str] = set()
        """Names of the actors declared on a broker while this middleware was on it."""
        self.consumer_jobs: list[Job] = []
        """The jobs of this middleware's periodic actors, each handler calling its actor: what
        a worker's own consumers run in RabbitMQ consumer mode (added by ``@periodic``)."""
        self._lock = threading.Lock()
        self._active: dict[int, tuple[ActiveRun, Any]] = {}
        self._heartbeat: InstanceHeartbeat | None = None
        self._finish_limit = FinishLimit()
        self._renewals = Renewals.of(self.backend)
        """One heartbeat for the runs of every worker thread, if the store renews several."""
        self._unanswered = HandBackLater.of(self.backend, self.queue_lease)
        """Hands back the runs whose start the store did not answer, once it answers."""
        warning = one_host_warning(self.backend)
        if warning is not None:
            log.warning("relay: %s", warning)

    def _schedulable_names(self, names: Iterable[str]) -> tuple[str, ...]:
        if isinstance(names, str):
            raise ConfigurationError(
                f"{self.schedulable_source} must be a list of actor names such as ['report'], "
                f"got {names!r}"
            )
        found = tuple(
            sorted({check_task_name(n, f"{self.schedulable_source}: actor name") for n in names})
        )
        if found and not stores_schedules(self.backend):
            raise UnsupportedOption("schedulable", self.backend.name, LEASE_BACKENDS)
        return found

    def on(
        self, event_type: type[EventT], callback: Callable[[EventT], object]
    ) -> Callable[[], None]:
        """Call ``callback(event)`` for every event of ``event_type`` (a :mod:`relay.events` class).

        Worker processes emit started, succeeded, failed, handed over and fenced off; the
        ``relay-dramatiq`` scheduler emits the deciding events (won, skipped, missed, taken over,
        dispatched…). A callback that raises is logged and never breaks a run or a message.
        Returns a function that unsubscribes.
        """
        return self.events.on(event_type, callback)

    def runner(self) -> Runner:
        """A runner owned by this worker thread, so two threads never share a run."""
        owner = f"{self.owner}/{threading.current_thread().name}"
        return Runner(
            self.backend, owner=owner, lease=self.lease, heartbeat=self.heartbeat,
            events=self.events, finish_limit=self._finish_limit, renewals=self._renewals,
            unanswered=self._unanswered,
        )  # fmt: skip

    # -- Dramatiq hooks ----------------------------------------------------------------------

    def before_declare_actor(self, broker: Broker, actor: Any) -> None:
        """Note the actor: it was declared with this middleware already on its broker. An
        ``async def`` actor's coroutine is cancelled once its run is lost (see
        :mod:`relay_dramatiq._coroutines`)."""
        self.declared.add(actor.actor_name)
        supervise_coroutine(actor)

    def before_process_message(self, broker: Broker, message: MessageProxy) -> None:
        """Start the message's run, or raise ``SkipMessage`` if it must not run."""
        if HEADER not in message.options or message.failed:
            return
        carried = read_message(message.options[HEADER])
        if carried is None:
            log.error("skipping message %s: malformed %r option", message.message_id, HEADER)
            raise SkipMessage("malformed Relay run option")
        run = carried.run
        try:
            active = self.runner().begin(run, max_attempts=carried.max_attempts)
        except Exception:
            log.exception(
                "skipping %s: could not start it; it is %s",
                run.id, what_becomes_of(self._unanswered, run.id),
            )  # fmt: skip
            raise SkipMessage(f"could not start {run.id}") from None
        if active is None:
            raise SkipMessage(f"{run.id} (token {run.token}) is stale, finished or held")
        with self._lock:
            self._active[threading.get_ident()] = (active, active.enter())

    def after_process_message(
        self,
        broker: Broker,
        message: MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """Finish the run: succeeded, failed, or handed over if the worker is shutting down."""
        active = self._leave()
        if active is None:
            return
        try:
            if isinstance(exception, Shutdown):
                active.release()
            elif exception is not None:
                active.fail(f"{type(exception).__name__}: {exception}")
            elif message.failed:
                active.fail("another middleware failed the message before the actor ran")
            else:
                active.succeed()
        except Exception:
            log.exception("could not record the result of %s", active.run.id)

    def after_skip_message(self, broker: Broker, message: MessageProxy) -> None:
        """A later middleware skipped a message we started: the attempt counts as failed.

        Failing (not handing over) bounds what a middleware that always skips can cost: the run
        is retried up to its ``max_attempts``, then recorded failed.
        """
        active = self._leave()
        if active is not None:
            active.fail("another middleware skipped the message")

    def after_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Start this worker process's own heartbeat (``relay instances``, ``relay health``)."""
        self._heartbeat = InstanceHeartbeat(self.backend, self.owner, "dramatiq-worker")
        self._heartbeat.start()
        # RabbitMQ consumer mode: Relay's consumers of the run queues
        _consumer.serve(self.backend, self.consumer_jobs, self.owner, self.events)

    def before_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Stop the heartbeat: the record expires on its own. A finish the store does not
        answer is retried for one lease more at most, then reported abandoned."""
        self._finish_limit.stop_within(self.lease)
        _consumer.stop_serving(self.backend)  # RabbitMQ consumer mode: hand unfinished runs over
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Hand over runs whose actors did not finish before the worker stopped waiting."""
        with self._lock:
            unfinished = [active for active, _ in self._active.values()]
            self._active.clear()
        for active in unfinished:
            active.release()

    def _leave(self) -> ActiveRun | None:
        with self._lock:
            entry = self._active.pop(threading.get_ident(), None)
        if entry is None:
            return None
        active, tokens = entry
        active.leave(tokens)
        return active


def _queue_lease(
    backend: ClaimBackend | LeaseBackend, queue_lease: Duration | None, lease: float
) -> float:
    if backend.capability == "claim":
        if queue_lease is not None:
            raise UnsupportedOption("queue_lease", backend.name, LEASE_BACKENDS)
        return 0.0
    value = DEFAULT_QUEUE_LEASE if queue_lease is None else seconds(queue_lease, "queue_lease")
    if value < lease:
        raise ConfigurationError(
            f"queue_lease ({value:g}s) must be at least the lease ({lease:g}s): it covers the "
            "time a run message waits in the queue, before the worker's lease takes over"
        )
    return value
