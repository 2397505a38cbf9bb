"""The standalone scheduler: each instance ticks on its own timer and runs what it wins (in
RabbitMQ consumer mode, publishes it to its job's run queue, which the consumers run)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import tzinfo
from types import FrameType, MappingProxyType, TracebackType
from typing import Any, Generic, Literal, TypeVar, overload

from typing_extensions import Self

from relay.backends import open_or_defer
from relay.consumer_mode import dispatcher
from relay.contract import ClaimBackend, LeaseBackend
from relay.durations import Duration, seconds
from relay.engine import ActiveRun, Decider, Loop, Runner, Step, Won
from relay.engine.coroutines import call_handler, is_coroutine_function
from relay.engine.dispatching import Dispatcher
from relay.engine.stored import ScheduleFeed
from relay.engine.waiting import wait_for_store
from relay.errors import (
    BackendUnavailable,
    ConfigurationError,
    NotAcknowledged,
    UnsupportedOption,
)
from relay.events import Event, EventBus
from relay.jobs import (
    LEASE_BACKENDS,
    Job,
    Overlap,
    check_handler,
    check_instance_options,
    check_retention,
    check_scheduler_options,
    check_tick,
    make_job,
)
from relay.runs import Run
from relay.schedule_store import stores_schedules
from relay.settings import check_task_name
from relay.stored import Schedule as StoredSchedule

__all__ = ["Handler", "Scheduler", "default_owner"]

log = logging.getLogger("relay.scheduler")
_LAST_FINISH = 5.0
"""Seconds a stop waits, after ``stop_timeout``, for a finish's last try to end (a store call
has a deadline: this is more than the default one)."""

BackendT = TypeVar("BackendT", ClaimBackend, LeaseBackend)
Handler = Callable[[Run], Any]
"""A job's function: called with the :class:`~relay.Run` it should perform; ``async def`` too."""
H = TypeVar("H", bound=Handler)
EventT = TypeVar("EventT", bound=Event)


def default_owner() -> str:
    """An owner name unique to this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class Scheduler(Generic[BackendT]):
    """Runs periodic jobs; any number of instances may run side by side on one backend.

    ``backend`` is a URL (``"sqlite:///relay.db"``) or a backend object. On a lease backend,
    ``lease`` (default 30 s) is how long a run stays ours without a heartbeat and ``heartbeat``
    (default a third of the lease, at most 10 s) how often a running run renews it. Both are refused
    on a claim backend. ``retention`` (lease backends; default 30 days, ``"never"`` keeps every
    run) is how long finished runs are kept: every instance's sweep prunes older ones in small
    batches. ``tick`` is how often the instance looks for due runs; ``clock`` (seconds since the
    epoch) decides which slots are due and exists for tests.

    :meth:`run` blocks; in an asyncio application, ``await scheduler.serve()`` (or
    ``async with scheduler:``) runs the instance inside the application's event loop.
    """

    @overload
    def __init__(
        self: Scheduler[LeaseBackend],
        backend: LeaseBackend,
        *,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        tick: Duration = 1.0,
        owner: str | None = None,
        max_workers: int = 8,
        stop_timeout: Duration = 10.0,
        clock: Callable[[], float] = time.time,
        retention: Duration | Literal["never"] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Scheduler[ClaimBackend],
        backend: ClaimBackend,
        *,
        tick: Duration = 1.0,
        owner: str | None = None,
        max_workers: int = 8,
        stop_timeout: Duration = 10.0,
        clock: Callable[[], float] = time.time,
        retention: Duration | Literal["never"] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Scheduler[Any],
        backend: str,
        *,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        tick: Duration = 1.0,
        owner: str | None = None,
        max_workers: int = 8,
        stop_timeout: Duration = 10.0,
        clock: Callable[[], float] = time.time,
        retention: Duration | Literal["never"] | None = None,
    ) -> None: ...

    def __init__(
        self,
        backend: Any,
        *,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        tick: Duration = 1.0,
        owner: str | None = None,
        max_workers: int = 8,
        stop_timeout: Duration = 10.0,
        clock: Callable[[], float] = time.time,
        retention: Duration | Literal["never"] | None = None,
    ) -> None:
        check_instance_options(backend, owner, max_workers, clock)
        self.backend: ClaimBackend | LeaseBackend = (
            open_or_defer(backend) if isinstance(backend, str) else backend
        )
        self._owns_backend = isinstance(backend, str)
        try:
            self.lease, self.heartbeat = check_scheduler_options(
                self.backend, lease=lease, heartbeat=heartbeat
            )
            self.tick_interval = check_tick(tick)
            self.stop_timeout = seconds(stop_timeout, "stop_timeout")
            retention_s = check_retention(self.backend, retention)
        except BaseException:
            if isinstance(backend, str):  # we opened it: do not leak its connections
                self.backend.close()
            raise
        self.owner = owner or default_owner()
        self.events = EventBus()
        """Every event of this instance (see :meth:`on`); each is logged by default."""
        self.tasks: dict[str, Handler] = {}
        """The tasks stored schedules may run here, by name (:meth:`task`, :meth:`register`)."""
        self._url = backend if isinstance(backend, str) else None
        """The URL the backend was opened from (``None``: a backend object was given)."""
        self._clock, self._retention = clock, retention_s
        self._build()
        # Runs execute on daemon threads, at most max_workers at once: a stopped instance exits
        # without finishing runs it handed over (another instance is running them by then).
        self._workers = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._unstarted: list[threading.Thread] = []
        self._active: set[ActiveRun] = set()
        self._stopping = threading.Event()
        self._serving: asyncio.AbstractEventLoop | None = None
        """The event loop :meth:`serve` runs in: coroutine handlers run there as its tasks."""
        self._wake: asyncio.Event | None = None
        self._serve_task: asyncio.Task[None] | None = None

    def _build(self) -> None:
        """The engine's parts on :attr:`backend`: the decider, the runner, the loop, the feed."""
        self.decider = Decider(
            self.backend, owner=self.owner, lease=self.lease, clock=self._clock,
            events=self.events, retention=self._retention,
        )  # fmt: skip
        self.runner = Runner(
            self.backend, owner=self.owner, lease=self.lease, heartbeat=self.heartbeat,
            events=self.events, clock=self._clock,
        )  # fmt: skip
        self.feed = (
            ScheduleFeed(self.decider, self.backend, self._stored_handler, active=False)
            if stores_schedules(self.backend)
            else None
        )
        self.decider.holding = self.runner.holding
        self.loop = Loop(
            self.decider, interval=self.tick_interval, sweep_every=self.heartbeat,
            role="scheduler", schedules=self.feed,
        )  # fmt: skip
        # A backend that hands runs out itself (RabbitMQ consumer mode) runs them, not our pool.
        self._dispatcher: Dispatcher | None = dispatcher(self.backend)

    def _move_to(self, backend: ClaimBackend | LeaseBackend, url: str | None = None) -> None:
        """Decide and run on ``backend`` from now on, with the same jobs, tasks and subscribers
        (the test kit gives an application's own scheduler each test's fresh store). What the
        instance knew of its former store is dropped; neither backend is closed by this."""
        stored = set(self.feed.stored) if self.feed is not None else set()
        code = [job for name, job in self.decider.jobs.items() if name not in stored]
        self.backend, self._url, self._owns_backend = backend, url, False
        self._build()
        for job in code:
            self.decider.add(job)
        tasks, self.tasks = self.tasks, {}
        for name, handler in tasks.items():
            self.register(name, handler)

    @property
    def jobs(self) -> dict[str, Job]:
        """The scheduled jobs by name."""
        return self.decider.jobs

    def on(
        self, event_type: type[EventT], callback: Callable[[EventT], object]
    ) -> Callable[[], None]:
        """Call ``callback(event)`` for every event of ``event_type`` (a :mod:`relay.events` class).

        ``on(relay.events.Event, cb)`` receives every event. Callbacks run in the thread that
        emits (the loop, or the run's thread); one that raises is logged and never breaks a run.
        Returns a function that unsubscribes.
        """
        return self.events.on(event_type, callback)

    @overload
    def job(
        self: Scheduler[ClaimBackend],
        *,
        cron: str | None = None,
        every: Duration | None = None,
        tz: str | tzinfo | None = None,
        name: str | None = None,
        stale_after: Duration | None = None,
        jitter: Duration | None = None,
    ) -> Callable[[H], H]: ...

    @overload
    def job(
        self: Scheduler[LeaseBackend],
        *,
        cron: str | None = None,
        every: Duration | None = None,
        tz: str | tzinfo | None = None,
        name: str | None = None,
        stale_after: Duration | None = None,
        overlap: Overlap | None = None,
        max_attempts: int | None = None,
        catch_up: Duration | None = None,
        jitter: Duration | None = None,
        expect_success_within: Duration | Literal[False] | None = None,
        alert_after_failures: int | None = None,
    ) -> Callable[[H], H]: ...

    def job(
        self,
        *bare: object,
        cron: str | None = None,
        every: Duration | None = None,
        tz: str | tzinfo | None = None,
        name: str | None = None,
        stale_after: Duration | None = None,
        overlap: Overlap | None = None,
        max_attempts: int | None = None,
        catch_up: Duration | None = None,
        jitter: Duration | None = None,
        expect_success_within: Duration | Literal[False] | None = None,
        alert_after_failures: int | None = None,
    ) -> Callable[[H], H]:
        """Schedule the decorated function; it is called with the :class:`~relay.Run`.

        ``cron`` (with ``tz``) or ``every`` (seconds or timedelta) sets the schedule. Lease
        backends also honour ``overlap`` ("allow", "skip" or "buffer_one": one overlapping run
        waits for the live one, later ones are skipped), ``max_attempts`` (default 3) and
        ``catch_up`` (seconds of missed slots to run after downtime, default 0); ``stale_after``
        and ``jitter`` (each slot starts a fixed, hashed delay in ``[0, jitter)`` late) work
        everywhere. Lease backends also take ``expect_success_within`` (by when after its slot
        a run should have succeeded, else the job is overdue; default derived from the schedule,
        ``False`` opts out) and ``alert_after_failures`` (failing after that many slots in a row
        failed, missed or stale): see :mod:`relay.expectations`. Options are validated here, once.

        An ``async def`` function runs to its end on an event loop (the one :meth:`serve` runs
        in, or a new one for the run under :meth:`run`), and so does an awaitable a plain
        function returns; once the run is lost it is cancelled (``asyncio.CancelledError``
        where it awaits), as it is when a stop hands it over. RabbitMQ consumer mode refuses
        ``async def`` functions.
        """
        if bare:  # @scheduler.job without parentheses passes the function here
            raise ConfigurationError(
                "scheduler.job needs parentheses and a schedule: write "
                "@scheduler.job(every=60) or @scheduler.job(cron='*/5 * * * *')"
            )

        def register(handler: H) -> H:
            check_handler(handler, name)
            self._check_coroutine(handler, name)
            job = make_job(
                self.backend,
                name=handler.__qualname__ if name is None else name,
                handler=handler,
                cron=cron,
                every=every,
                tz=tz,
                stale_after=stale_after,
                overlap=overlap,
                max_attempts=max_attempts,
                catch_up=catch_up,
                jitter=jitter,
                expect_success_within=expect_success_within,
                alert_after_failures=alert_after_failures,
            )
            self.decider.add(job)
            return handler

        return register

    def task(self, name: str) -> Callable[[H], H]:
        """Allow stored schedules (:meth:`relay.Control.add_schedule`) to run the decorated
        function as task ``name``. It is called with the :class:`~relay.Run`, whose ``args``,
        ``kwargs`` and ``schedule_version`` are the stored schedule's when the run was won.

        Only tasks allowed here run here: whoever can write to the store cannot run anything
        else. The instance records its tasks with its heartbeat, so ``add_schedule`` can check.
        """

        def decorate(handler: H) -> H:
            self.register(name, handler)
            return handler

        return decorate

    def register(self, name: str, handler: Handler) -> None:
        """Allow task ``name`` (see :meth:`task`); refused if the name is taken or not usable,
        and on a claim backend (:class:`~relay.errors.UnsupportedOption`: it stores nothing)."""
        if self.feed is None:
            raise UnsupportedOption("task", self.backend.name, LEASE_BACKENDS)
        check_handler(handler, name)
        check_task_name(name)
        if name in self.tasks:
            raise ConfigurationError(f"task {name!r} is already allowed: give each task one name")
        self.tasks[name] = handler
        if self.loop.instance is not None:  # recorded with the next heartbeat
            self.loop.instance.info = replace(
                self.loop.instance.info, tasks=tuple(sorted(self.tasks))
            )
        if self.feed is not None:  # from now on each step reads the stored schedules
            self.feed.allowed = ", ".join(sorted(self.tasks))
            self.feed.active = True

    def _stored_handler(self, schedule: StoredSchedule) -> Handler | None:
        """The handler of a stored schedule: its task's function, given the stored arguments."""
        function = self.tasks.get(schedule.task)
        if function is None:
            return None
        return StoredCall(function, schedule.args, schedule.kwargs or _NO_KWARGS, schedule.version)

    def run(self) -> None:
        """Tick until :meth:`stop` (or SIGTERM / SIGINT), then hand over what will not finish.

        A backend the scheduler opened from a URL is closed when it returns. An instance whose
        code job has the name of a stored schedule refuses to start (``ConfigurationError``).
        A store that cannot be reached yet is waited for (``store_waiting`` is reported every
        30 s): nothing runs and no heartbeat is recorded until it answers.
        """
        restore = self._install_signal_handlers()
        try:
            if self._wait_for_store():
                self._serve_dispatcher()
                self._loop()
        finally:
            self._close()
            restore()

    async def serve(self, *, handle_signals: bool | None = None) -> None:
        """Run this instance inside the running event loop until :meth:`stop` or cancellation.

        For asyncio applications (FastAPI, Starlette, aiohttp): the loop is never blocked. Store
        calls run in a thread of the instance's own, plain handlers in the run threads, and
        ``async def`` handlers as tasks of this loop.
        When the task is cancelled (the application shuts down) or :meth:`stop` is called, it
        stops as :meth:`run` does: runs get ``stop_timeout`` to finish, the rest are handed
        over (coroutines cancelled), and a backend opened from a URL is closed; a cancelled
        task then raises ``CancelledError``.

        ``handle_signals``: whether SIGTERM and SIGINT stop it (as :meth:`stop`), their former
        handlers put back when it returns. By default (``None``) it takes them when it runs in
        the main thread and nothing owns SIGTERM yet (a plain ``asyncio.run(main())``), and
        leaves them to a server that installed its own (uvicorn, hypercorn, aiohttp's
        ``run_app``): stop it from the app's shutdown then (``async with scheduler:`` in a
        lifespan). ``True`` takes them always (the main thread only), ``False`` never.
        """
        loop = self._serving = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        # A thread of its own for the store's calls: a busy default executor must not delay ticks.
        store = ThreadPoolExecutor(1, thread_name_prefix=f"relay-serve-{self.owner}")
        restore = self._take_signals(handle_signals)
        try:
            waiting = loop.run_in_executor(store, self._wait_for_store)
            try:
                if not await asyncio.shield(waiting):
                    return  # stopped before the store answered
            except asyncio.CancelledError:
                self._stopping.set()  # the wait returns within one try
                await asyncio.wait({waiting})
                raise
            await loop.run_in_executor(store, self._serve_dispatcher)
            while not self._stopping.is_set():
                step = loop.run_in_executor(store, self._step)
                try:
                    next_in = (await asyncio.shield(step)).next_in
                except asyncio.CancelledError:
                    await asyncio.wait({step})  # the step in flight ends before the hand-over
                    raise
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), next_in)
        finally:
            try:
                await asyncio.shield(loop.run_in_executor(store, self._close))
            finally:
                store.shutdown(wait=False)
                restore()

    def _take_signals(self, handle_signals: bool | None) -> Callable[[], None]:
        """:meth:`serve`'s SIGTERM and SIGINT handlers, if it takes them; what puts back the
        former ones."""
        main = threading.current_thread() is threading.main_thread()
        if handle_signals is None:
            handle_signals = main and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
        elif handle_signals and not main:
            raise ConfigurationError(
                "serve(handle_signals=True) runs in the main thread only (Python delivers "
                "signals there): serve there, or stop the scheduler from the app's shutdown"
            )
        return self._install_signal_handlers() if handle_signals else lambda: None

    async def __aenter__(self) -> Self:
        """Start :meth:`serve` as a task of the running loop (an error it ends with is logged
        at once, and raised when the block is left)."""
        self._serve_task = asyncio.ensure_future(self.serve())
        self._serve_task.add_done_callback(_log_failure)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop, hand over what will not finish, and wait for :meth:`serve` to return."""
        self.stop()
        if self._serve_task is not None:
            await self._serve_task

    def _start_feed(self) -> None:
        if self.feed is not None:
            self.feed.start_when_reachable()

    def stop(self) -> None:
        """Ask :meth:`run` or :meth:`serve` to return; safe from any thread or signal handler."""
        self._stopping.set()
        loop, wake = self._serving, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: serve() is over
                loop.call_soon_threadsafe(wake.set)

    def run_pending(self) -> list[Run]:
        """One tick: decide due runs and take over abandoned ones; start what was won.

        A store that cannot answer is reported (``StoreUnavailable``) and nothing is started.

        In RabbitMQ consumer mode the runs won are published to their jobs' run queues, and the
        first call starts this process's consumers (as :meth:`run` does): from then on they run,
        in the background, what the broker hands this process, until :meth:`shutdown`. So a
        ``run_pending()`` loop runs its jobs, through the run queues.
        """
        if self._dispatcher is not None:  # the same consumers on every call (once per backend)
            self._dispatcher.serve(list(self.jobs.values()), self.owner, self.events)
        return [item.run for item in self._step(force=True).won]

    def join(self, timeout: float | None = None) -> bool:
        """Wait until no run is in flight; ``False`` if some still are after ``timeout``.

        In RabbitMQ consumer mode no run is ever in flight here: the consumers run them, and
        :meth:`shutdown` waits up to ``stop_timeout`` for theirs.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._threads:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def shutdown(self) -> None:
        """Stop taking runs, wait up to ``stop_timeout`` for running ones, hand over the rest.

        Runs not yet started are handed over at once. A run still going after ``stop_timeout``
        is handed over too, and its thread is abandoned: another instance takes the run at once.
        A finish the store does not answer is retried for ``stop_timeout`` at most, then reported
        abandoned (its lease runs out and another instance takes the run over).
        """
        self._stopping.set()
        self.runner.stop_finishing(self.stop_timeout)
        if self._dispatcher is not None:  # its consumers wait, then hand their runs over
            self._dispatcher.stop_serving(self.stop_timeout)
        self.join(self.stop_timeout)
        with self._lock:
            unfinished = list(self._active)
        for active in unfinished:
            active.release()
        if any(active.finishing for active in unfinished):
            self.join(_LAST_FINISH)  # its last try ends, and reports the run abandoned

    def _serve_dispatcher(self) -> None:
        self._start_feed()  # stored schedules first: a clash with a code job refuses to start
        if self._dispatcher is not None:  # RabbitMQ consumer mode: its consumers run the runs
            self._dispatcher.serve(list(self.jobs.values()), self.owner, self.events)

    def _wait_for_store(self) -> bool:
        """Wait until the store answers (a URL's store may be down at start); ``False`` if the
        instance was stopped first."""
        return wait_for_store(
            self.backend, owner=self.owner, events=self.events, stopping=self._stopping
        )

    def _close(self) -> None:
        self.shutdown()
        if self._owns_backend:
            self.backend.close()

    def _check_coroutine(self, handler: Handler, name: str | None) -> None:
        if self._dispatcher is None or not is_coroutine_function(handler):
            return
        label = name or getattr(handler, "__qualname__", repr(handler))
        raise ConfigurationError(
            f"job {label!r} is async def, but RabbitMQ consumer mode (mode=consumer) calls "
            "handlers on its consumer threads, synchronously: make it a plain def (it may call "
            "asyncio.run(...)), or use a lease backend, where async handlers run on an event loop"
        )

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._stopping.wait(self._step().next_in)

    def _step(self, force: bool = False) -> Step:
        """One step of the engine's loop; the threads of the runs it dispatched start after it.

        So each run's ``dispatched`` event comes before its thread reports ``started``.
        """
        step = self.loop.step(self._dispatch, force=force)
        with self._lock:
            unstarted, self._unstarted = self._unstarted, []
        for thread in unstarted:
            thread.start()
        return step

    def _dispatch(self, won: Won) -> bool:
        """Give ``won`` a thread (started after the step); hand it back if the instance stops.

        In RabbitMQ consumer mode the run goes to its job's run queue instead, even while
        stopping (the gate is won: unpublished, the run would be lost); the consumers run it.
        """
        if self._dispatcher is not None:
            self._dispatcher.dispatch(won)
            return True
        with self._lock:
            stopping = self._stopping.is_set()
            if not stopping:
                thread = threading.Thread(
                    target=self._execute, args=(won,), name=f"relay-{won.run.id}", daemon=True
                )
                self._threads.add(thread)
                self._unstarted.append(thread)
        if stopping:
            self.runner.release(won.run)
            return False
        return True

    def _execute(self, won: Won) -> None:
        try:
            while not self._workers.acquire(timeout=0.05):
                if self._stopping.is_set():  # still waiting for a free worker: hand it over
                    self.runner.release(won.run)
                    return
            try:
                self._run(won)
            finally:
                self._workers.release()
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _run(self, won: Won) -> None:
        handler = won.job.handler
        assert handler is not None
        try:
            active = self.runner.begin(won.run, max_attempts=won.job.max_attempts)
        except NotAcknowledged as exc:  # handed back already
            log.error("could not start %s: %s", won.run.id, exc)
            return
        except BackendUnavailable as exc:
            self.decider.release_at_next_sweep(won.run)
            log.error(
                "could not start %s, it is handed back at the next sweep: %s", won.run.id, exc
            )
            return
        if active is None:
            return
        with self._lock:
            stopping = self._stopping.is_set()
            if not stopping:
                self._active.add(active)
        if stopping:
            active.release()  # the instance stopped while this run was starting
            return
        loop = self._serving
        try:
            active.call(lambda run: call_handler(handler, run, loop))
        finally:
            with self._lock:
                self._active.discard(active)

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("received %s, stopping", signal.Signals(signum).name)
            self.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the scheduler stopped serving", exc_info=task.exception())


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})


class StoredCall:
    """A stored schedule's handler: its task's function, called with the run carrying the
    schedule's arguments and version (one small object per stored schedule)."""

    __slots__ = ("args", "function", "kwargs", "version")

    def __init__(
        self, function: Handler, args: tuple[Any, ...], kwargs: Mapping[str, Any], version: int
    ) -> None:
        self.function, self.args, self.kwargs, self.version = function, args, kwargs, version

    def __call__(self, run: Run) -> Any:
        return self.function(
            replace(run, args=self.args, kwargs=self.kwargs, schedule_version=self.version)
        )
