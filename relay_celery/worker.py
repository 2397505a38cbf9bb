"""The worker side: start a published run with its token, heartbeat, and record its outcome.

:func:`install` adds a worker bootstep. When the worker starts, the step checks Relay's settings
(a bad one stops the worker with a message naming it) and wraps each task's ``run``, so a message
carrying a run is started through the core's :class:`~relay.engine.Runner` before the task body
runs, and is dropped (``celery.exceptions.Ignore``) when the run must not run: a stale token, a
finished run, or a run another worker already started.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, Task, bootsteps
from celery.exceptions import Ignore
from celery.worker import state as worker_state

from relay.backends import Backend, open_backend
from relay.engine import ActiveRun, Runner
from relay.errors import RelayError
from relay.health import InstanceHeartbeat
from relay.jobs import Job
from relay.runs import HEADER, Run, run_from_headers
from relay.scheduler import default_owner
from relay_celery.config import CelerySettings, load_settings, open_checked
from relay_celery.consumer import consumer_backend, run_delivery, setup_worker

__all__ = ["RelayStep", "install"]

log = logging.getLogger("relay.celery.worker")
_WRAPPED = "_relay_wrapped"


def install(app: Celery) -> None:
    """Make ``app``'s workers start, heartbeat and finish the runs that beat publishes.

    Call it where the app is defined, next to ``beat_scheduler``. Idempotent.
    """
    steps = app.steps["worker"]
    if RelayStep not in steps:
        steps.add(RelayStep)


class RelayStep(bootsteps.StartStopStep):
    """Worker bootstep: validates Relay's settings at start, wraps every task, and records the
    worker's own heartbeat (``relay instances``, ``relay health``) while it runs."""

    name = "relay_celery.worker.RelayStep"
    label = "Relay"
    requires = ("celery.worker.components:Pool",)  # beat from the main process, after forking

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app: Celery = parent.app
        backend, settings = open_checked(load_settings(app))
        log.info("relay: worker runs on %s", backend.name)
        try:
            consumer = consumer_backend(backend)  # RabbitMQ consumer mode: consume run queues
            jobs = None if consumer is None else setup_worker(parent, consumer)
        finally:
            backend.close()
        hooks = RunHooks(settings, jobs)
        for task in app.tasks.values():
            hooks.wrap(task)
        self._settings = settings
        self._heartbeat: InstanceHeartbeat | None = None

    def start(self, parent: Any) -> None:
        """Start the worker's heartbeat, on a backend connection of its own."""
        try:
            backend = open_backend(self._settings.backend)
        except RelayError as exc:
            log.error("relay: the worker's heartbeat will not be recorded: %s", exc)
            return
        self._heartbeat = InstanceHeartbeat(backend, default_owner(), "worker")
        self._heartbeat.start()

    def stop(self, parent: Any) -> None:
        """Stop the heartbeat: the record expires on its own."""
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
            heartbeat.backend.close()

    terminate = stop


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
        self._owner = ""

    def wrap(self, task: Task[Any, Any]) -> None:
        """Replace ``task.run`` with a version that honours a run header (other calls pass)."""
        if getattr(task, _WRAPPED, False):
            return
        body: Callable[..., Any] = task.run

        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> Any:
            relay_run = run_from_headers(_header(task))
            if relay_run is None:
                return body(*args, **kwargs)
            if self.consumer_jobs is not None:
                return run_delivery(
                    relay_run,
                    task.request,
                    self.consumer_jobs,
                    lambda delivered: self.execute(delivered, body, args, kwargs),
                    self.runner().backend,
                )
            return self.execute(relay_run, body, args, kwargs)

        # Celery's tracer calls the instance's ``run`` (or ``__call__``, which calls it).
        task.run = run  # type: ignore[method-assign]
        setattr(task, _WRAPPED, True)

    def execute(self, run: Run, body: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
        """Begin ``run``, call the body, record the outcome; ``Ignore`` drops the message."""
        active = self._begin(run)
        result: list[Any] = []
        errors: list[Exception] = []

        def handler(_: Run) -> None:
            try:
                result.append(body(*args, **kwargs))
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
            log.warning("relay: handing %s over, the worker is stopping", run.id)
            active.release()
            if errors:
                raise errors[0] from None
            raise
        if errors:
            raise errors[0]
        return result[0]

    def _begin(self, run: Run) -> ActiveRun:
        try:
            active = self.runner().begin(run)
        except Exception as exc:
            # Never run what the store did not confirm: the lease expires and beat re-dispatches.
            log.error("relay: could not start %s, dropping this message: %s", run.id, exc)
            raise Ignore() from exc
        if active is None:
            log.info("relay: dropping a stale or duplicate message for %s", run.id)
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
                    self._backend = open_backend(self.settings.backend)
                    self._owner = default_owner()
                    self._pid = os.getpid()
                    self._local = threading.local()
                assert self._backend is not None
                runner = Runner(
                    self._backend,
                    owner=f"{self._owner}/{threading.current_thread().name}",
                    lease=self.settings.lease,
                    heartbeat=self.settings.heartbeat,
                )
                self._local.runner = runner
        return runner


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
