"""The worker side: start a published run with its token, heartbeat, and record its outcome.

:func:`install` adds a worker bootstep (and makes Relay the app's beat scheduler unless the app
chose another). When the worker starts, the step checks Relay's settings (a bad one stops the
worker with a message naming it) and wraps each task's ``run``, so a message carrying a run is
started through the core's :class:`~relay.engine.Runner` before the task body runs, and is dropped
(``celery.exceptions.Ignore``) when the run must not run: a stale token, a finished run, or a run
another worker already started.

Relay owns the retries of scheduled runs on a lease backend: a scheduled task declaring
``autoretry_for`` stops the worker at start, and ``self.retry()`` inside a run fails this attempt
(:class:`RetryRequested`) instead of publishing a message the worker would drop.
"""

from __future__ import annotations

import functools
import inspect
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from celery import Celery, Task, bootsteps
from celery.exceptions import Ignore
from celery.signals import worker_shutting_down
from celery.worker import state as worker_state

from relay.backends import Backend, open_backend
from relay.durations import Duration
from relay.engine import ActiveRun, FinishLimit, HandBackLater, Renewals, Runner, current_run
from relay.engine.coroutines import is_coroutine_function, not_awaitable
from relay.engine.unacknowledged import what_becomes_of
from relay.errors import ConfigurationError, RelayError
from relay.health import InstanceHeartbeat
from relay.jobs import Job
from relay.retries import foreign_retries
from relay.runs import HEADER, Run
from relay.scheduler import default_owner
from relay.tracing import read_message
from relay_celery.config import (
    CelerySettings,
    load_settings,
    open_checked,
    remember_install_options,
)
from relay_celery.consumer import consumer_backend, run_delivery, setup_worker
from relay_celery.events import bus
from relay_celery.stored import allowed_tasks

__all__ = [
    "SCHEDULER",
    "RelayStep",
    "RetryRequested",
    "check_scheduled_tasks",
    "install",
    "refuse_coroutine_tasks",
    "require_worker_hooks",
]

log = logging.getLogger("relay.celery.worker")
_WRAPPED = "_relay_wrapped"
_CARRIED = "relay_message"
"""The attribute of a task's request holding the run message read where it arrived."""
SCHEDULER = "relay_celery.RelayScheduler"
POOL_CHECK = 0.2
"""Seconds between a prefork worker's checks for children that died (Celery's own: 5 s)."""
"""The value :func:`install` gives ``beat_scheduler`` when the app sets none."""


def install(
    app: Celery,
    backend: str | None = None,
    *,
    lease: Duration | None = None,
    heartbeat: Duration | None = None,
    queue_lease: Duration | None = None,
) -> None:
    """Set up both sides of ``app``: the workers' run hooks and beat's scheduler.

    Call it where the app is defined, in the module beat and workers both load. Workers then
    start, heartbeat and finish the runs beat publishes; ``beat_scheduler`` becomes
    ``relay_celery.RelayScheduler`` unless the app's configuration names a scheduler (so setting
    ``beat_scheduler`` back to ``celery.beat:PersistentScheduler`` is the whole roll-back). The
    keyword settings are the lowest layer: ``settings.RELAY`` and ``app.conf.relay_*`` override
    them. Idempotent.
    """
    remember_install_options(
        app, backend=backend, lease=lease, heartbeat=heartbeat, queue_lease=queue_lease
    )
    steps = app.steps["worker"]
    if RelayStep not in steps:
        steps.add(RelayStep)
    _default_beat_scheduler(app)


def require_worker_hooks(app: Celery) -> None:
    """Refuse to schedule for an app whose workers would not run Relay's hooks.

    Beat and workers load the same app module, so an app without :func:`install` means workers
    that would run every published run without its lease: beat would publish it again and again.
    """
    if RelayStep not in app.steps["worker"]:
        raise ConfigurationError(
            "this Celery app has no Relay worker hooks, so its workers would run each published "
            "run without leasing it and beat would publish it again: call "
            "relay_celery.install(app) where the app is defined (the module beat and workers "
            "both load)"
        )


def _default_beat_scheduler(app: Celery) -> None:
    """Make RelayScheduler the app's beat scheduler unless its configuration names one."""
    any_app: Any = app

    def choose(source: Any = None, **_: Any) -> None:
        conf = source if source is not None else any_app.conf
        if not conf.value_set_for("beat_scheduler"):
            conf.beat_scheduler = SCHEDULER

    if any_app.configured:
        choose()
    else:
        any_app.on_after_configure.connect(choose, weak=False, dispatch_uid="relay_celery")


class RelayStep(bootsteps.StartStopStep):
    """Worker bootstep: validates Relay's settings at start, wraps every task, and records the
    worker's own heartbeat (``relay instances``, ``relay health``) while it runs."""

    name = "relay_celery.worker.RelayStep"
    label = "Relay"
    requires = ("celery.worker.components:Pool",)  # beat from the main process, after forking

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app: Celery = parent.app
        loaded = load_settings(app)
        allowed = allowed_tasks(app, loaded)
        backend, settings = open_checked(loaded)
        log.info("relay: worker runs on %s", backend.name)
        try:
            consumer = consumer_backend(backend)  # RabbitMQ consumer mode: consume run queues
            jobs = None if consumer is None else setup_worker(parent, consumer)
        finally:
            backend.close()
        check_scheduled_tasks(app, allowed, settings.capability)
        hooks = RunHooks(settings, jobs)
        for task in app.tasks.values():
            hooks.wrap(task)
        self._settings = settings
        self._hooks = hooks
        self._heartbeat: InstanceHeartbeat | None = None
        # Sent in the main process as a warm or cold shutdown begins, before Celery waits for
        # the running tasks: the earliest moment to bound the finishes of every pool process.
        worker_shutting_down.connect(self._shutting_down)  # weak: it lives as long as the step

    def _shutting_down(self, **_: Any) -> None:
        self._hooks.stop_finishing()

    def start(self, parent: Any) -> None:
        """Start the worker's heartbeat, on a backend connection of its own."""
        try:  # deferred: a store down at start is recorded once it answers
            backend = open_backend(self._settings.backend, deferred=True)
        except RelayError as exc:
            log.error("relay: the worker's heartbeat will not be recorded: %s", exc)
            return
        self._heartbeat = InstanceHeartbeat(backend, default_owner(), "worker")
        self._heartbeat.start()

    def register_with_event_loop(self, parent: Any, hub: Any) -> None:
        """Check a prefork pool's children every ``POOL_CHECK`` seconds, not Celery's 5 s.

        Celery notices most killed children at once, but some only at its pool check every 5 s;
        meanwhile the worker keeps taking messages for a child that is gone, so a run beat
        re-dispatched to it waited up to 5 s more (``bench/failover_celery.py``).
        """
        maintain = getattr(parent.pool, "maintain_pool", None)  # prefork only
        if maintain is not None:
            hub.call_repeatedly(POOL_CHECK, maintain)

    def stop(self, parent: Any) -> None:
        """Stop the heartbeat (the record expires on its own), and bound the finishes still
        retried: a finish the store does not answer is given up one lease from now, in every
        pool process, then reported abandoned (done as the shutdown begins already, on
        ``worker_shutting_down``: a warm shutdown waits for the running tasks first)."""
        self._hooks.stop_finishing()
        worker_shutting_down.disconnect(self._shutting_down)
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
            heartbeat.backend.close()

    terminate = stop


def check_scheduled_tasks(
    app: Celery, allowed: Iterable[str], capability: Literal["claim", "lease"]
) -> None:
    """Refuse the scheduled tasks the worker could not run as Relay runs them: ``async def``
    ones, and on a lease store ones declaring Celery retries (``autoretry_for``).

    Beat and the worker both call it at start, so beat never publishes what the worker refuses.
    """
    refuse_coroutine_tasks(app, allowed)
    if capability == "lease":
        _refuse_celery_retries(app, allowed)


def refuse_coroutine_tasks(app: Celery, allowed: Iterable[str] = ()) -> None:
    """Refuse a scheduled task (a ``beat_schedule`` entry's, or one ``allowed`` for stored
    schedules) that is ``async def``: Celery cannot run it.

    A Celery worker calls the task and gets a coroutine it never awaits: the run would be
    recorded succeeded and its work never done. Beat and workers both check, at start.
    """
    for task, where, _ in _scheduled_tasks(app, allowed):
        if is_coroutine_function(inspect.unwrap(task.run)):
            raise ConfigurationError(
                f"task {task.name!r} ({where}) is async def, but Celery "
                "workers call tasks synchronously: its coroutine would never run. Make the "
                "task a plain def that runs the coroutine, such as asyncio.run(main())"
            )


def _refuse_celery_retries(app: Celery, allowed: Iterable[str] = ()) -> None:
    """A scheduled task may not declare Celery retries: Relay retries its runs (lease backends)."""
    for task, where, fix in _scheduled_tasks(app, allowed):
        if getattr(task, "autoretry_for", None):
            raise foreign_retries(f"task {task.name!r} ({where})", "autoretry_for", fix)


def _scheduled_tasks(
    app: Celery, allowed: Iterable[str]
) -> Iterator[tuple[Task[Any, Any], str, str]]:
    """Each task Relay schedules, with where it is scheduled and where its retries are set."""
    for entry, values in (app.conf.beat_schedule or {}).items():
        name = values.get("task") if isinstance(values, dict) else None
        task = app.tasks.get(name) if isinstance(name, str) else None
        if task is not None:
            yield task, f"beat_schedule entry {entry!r}", f"in app.conf.relay_jobs[{entry!r}]"
    for name in allowed:
        task = app.tasks.get(name)
        if task is not None:
            yield task, "allowed for stored schedules", "in its stored schedules (add_schedule)"


class RetryRequested(Exception):
    """A task called ``self.retry()`` inside a Relay run: this attempt is recorded failed.

    Relay then retries the run under its ``max_attempts``, in a new message with a new token.
    """


class RunHooks:
    """Runs a task body under a run's lease; one backend connection per worker process."""

    def __init__(
        self, settings: CelerySettings, consumer_jobs: dict[str, Job] | None = None
    ) -> None:
        self.settings = settings
        self.consumer_jobs = consumer_jobs
        """In RabbitMQ consumer mode, the jobs whose runs arrive on their run queues."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pid = 0
        self._backend: Backend | None = None
        self._renewals: Renewals | None = None
        """One heartbeat for the runs of every worker thread, if the store renews several."""
        self._unanswered: HandBackLater | None = None
        """Hands back the runs whose start the store did not answer, once it answers."""
        self._owner = ""
        # Made before the pool forks, so each prefork child shares it: set when the worker
        # stops, it bounds the finishes of every process's runners (see stop_finishing).
        self._stopping = multiprocessing.Event()
        self._finish_limit = FinishLimit()

    def stop_finishing(self) -> None:
        """The worker stops: every process gives up a finish the store has not answered one
        lease from now (``RunAbandoned``), so a warm shutdown ends."""
        self._stopping.set()
        self._finish_limit.stop_within(self.settings.lease)  # this process's runners at once

    def _limit_when_stopping(self, limit: FinishLimit) -> None:
        """In a pool process: wait for the worker's stop, then bound this process's finishes."""
        self._stopping.wait()
        limit.stop_within(self.settings.lease)

    def wrap(self, task: Task[Any, Any]) -> None:
        """Replace ``task.run`` with a version that honours a run header (other calls pass)."""
        if getattr(task, _WRAPPED, False):
            return
        body: Callable[..., Any] = task.run

        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> Any:
            carried = read_message(_header(task))
            if carried is None:
                return body(*args, **kwargs)
            relay_run, max_attempts = carried
            setattr(task.request, _CARRIED, carried)  # for task.retry(): read once, here
            if self.consumer_jobs is not None:
                return run_delivery(
                    relay_run,
                    task.request,
                    self.consumer_jobs,
                    lambda delivered: self.execute(delivered, body, args, kwargs, max_attempts),
                    self.runner().backend,
                )
            return self.execute(relay_run, body, args, kwargs, max_attempts)

        # Celery's tracer calls the instance's ``run`` (or ``__call__``, which calls it).
        task.run = run  # type: ignore[method-assign]
        if self.settings.capability == "lease":
            _own_retries(task)
        setattr(task, _WRAPPED, True)

    def execute(
        self,
        run: Run,
        body: Callable[..., Any],
        args: Any,
        kwargs: dict[str, Any],
        max_attempts: int = 0,
    ) -> Any:
        """Begin ``run``, call the body, record the outcome; ``Ignore`` drops the message."""
        active = self._begin(run, max_attempts)
        result: list[Any] = []
        errors: list[Exception] = []

        def handler(_: Run) -> None:
            try:
                result.append(not_awaitable(body(*args, **kwargs), body, "Celery"))
            except Exception as exc:
                errors.append(exc)
                if _terminating():
                    raise _Interrupted() from exc
                raise

        try:
            active.call(handler)
        except BaseException:
            # The worker is stopping under the task (cold shutdown, SystemExit): the run is not
            # the task's failure; hand it over so a beat re-dispatches it at once.
            active.release()
            if errors:
                raise errors[0] from None
            raise
        if errors:
            raise errors[0]
        return result[0]

    def _begin(self, run: Run, max_attempts: int) -> ActiveRun:
        try:
            active = self.runner().begin(run, max_attempts=max_attempts)
        except Exception as exc:
            # Never run what the store did not confirm: beat dispatches the run again.
            log.error(
                "relay: could not start %s, dropping this message (the run is %s): %s",
                run.id, what_becomes_of(self._unanswered, run.id), exc,
            )  # fmt: skip
            raise Ignore() from exc
        if active is None:  # refused, and reported fenced off by the runner
            raise Ignore()
        return active

    def runner(self) -> Runner:
        """This thread's runner, on this process's backend (opened after a fork, never shared).

        Each worker thread is an owner of its own: the store then refuses a duplicate delivery
        of a run to a second thread of the same worker, as it does to another worker.
        """
        runner: Runner | None = getattr(self._local, "runner", None)
        if runner is None or self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    # Deferred: while the store is down each start is refused (the message is
                    # dropped, its run dispatched again), and the next one tries it again.
                    self._backend = open_backend(self.settings.backend, deferred=True)
                    self._renewals = Renewals.of(self._backend)
                    # A run's lease outlives no unanswered start by more than the queue lease.
                    self._unanswered = HandBackLater.of(self._backend, self.settings.queue_lease)
                    self._owner = default_owner()
                    self._finish_limit = FinishLimit()  # this process's, set by the stop
                    threading.Thread(
                        target=self._limit_when_stopping, args=(self._finish_limit,),
                        name="relay-finish-limit", daemon=True,
                    ).start()  # fmt: skip
                    self._pid = os.getpid()
                    self._local = threading.local()
                assert self._backend is not None
                runner = Runner(
                    self._backend,
                    owner=f"{self._owner}/{threading.current_thread().name}",
                    lease=self.settings.lease,
                    heartbeat=self.settings.heartbeat,
                    events=bus,
                    renewals=self._renewals,
                    unanswered=self._unanswered,
                    finish_limit=self._finish_limit,
                )
                self._local.runner = runner
        return runner


def _own_retries(task: Task[Any, Any]) -> None:
    """Turn ``task.retry()`` inside a Relay run into a failed attempt; other calls pass."""
    original: Callable[..., Any] = task.retry

    @functools.wraps(original)
    def retry(*args: Any, **kwargs: Any) -> Any:
        run = current_run()
        if run is None or getattr(task.request, _CARRIED, None) is None:
            return original(*args, **kwargs)
        exc = kwargs.get("exc", args[2] if len(args) > 2 else None)
        countdown = kwargs.get("countdown") or kwargs.get("eta")
        delay = (
            f" (its countdown/eta {countdown} cannot be honoured: Relay retries a failed run "
            "at a beat's next sweep)"
            if countdown is not None
            else ""
        )
        message = (
            f"{task.name} asked Celery to retry {run.id}; Relay owns the retries of scheduled "
            "runs: this attempt is recorded failed and the run is retried while it has attempts "
            f"left (max_attempts){delay}"
        )
        log.warning("relay: %s", message)
        raise RetryRequested(message) from exc if isinstance(exc, BaseException) else None

    task.retry = retry  # type: ignore[method-assign]


class _Interrupted(BaseException):
    """Carries an exception the worker's cold shutdown raised in the task past ActiveRun.call."""


def _terminating() -> bool:
    """Whether the worker is in a cold shutdown (Celery raises into running tasks then)."""
    return worker_state.should_terminate is not None


def _header(task: Task[Any, Any]) -> object:
    request = task.request
    value = request.get(HEADER)
    if value is None and isinstance(request.headers, dict):
        value = request.headers.get(HEADER)
    return value
