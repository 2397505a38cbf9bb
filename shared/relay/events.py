"""Events: what the engine decided and did, as typed values emitted in one place.

The engine (:mod:`relay.engine`) is the only code that creates events; the standalone scheduler,
the Celery beat and worker, and the Dramatiq scheduler and middleware report nothing of their own.
Logs, user hooks, metrics and traces all subscribe to the same stream through an :class:`EventBus`.

Every run event carries the run's id, job, slot, attempt, token and owner; a few add a duration or a
reason. Each event type has a log ``level`` an operator would choose and a one-line ``message()``.
:meth:`Event.fields` gives the values as flat ``relay_*`` keys, the ``extra`` of its log record, so
JSON log formatters pick them up.

Every bus logs what it carries (:func:`log_event`): an event of type ``T`` goes to the logger
``relay.events.T`` (``relay.events.taken_over``…) at the event's level, so an operator can raise or
lower one kind of event without touching the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, Protocol, TypeVar

from relay.runs import format_slot

__all__ = [
    "DefinitionDeferred",
    "DefinitionResumed",
    "Event",
    "EventBus",
    "FencedOff",
    "JobFailing",
    "JobOverdue",
    "JobRecovered",
    "RunAbandoned",
    "RunBuffered",
    "RunDispatched",
    "RunEvent",
    "RunExhausted",
    "RunFailed",
    "RunHandedOver",
    "RunLeaseLost",
    "RunLost",
    "RunPickedUp",
    "RunRetried",
    "RunSkipped",
    "RunStarted",
    "RunSucceeded",
    "RunTakenOver",
    "RunWon",
    "RunsMissed",
    "ScheduleApplied",
    "ScheduleNotRunnable",
    "StoreIncompatible",
    "StoreRecovered",
    "StoreUnavailable",
    "StoreWaiting",
    "Subscribable",
    "log_event",
    "logger_for",
]

log = logging.getLogger("relay.events")
"""Where :class:`EventBus` logs a callback that raised; the parent of every event's logger."""


@dataclass(frozen=True)
class Event:
    """Something the engine decided or saw. Subclasses name one kind of event each."""

    type: ClassVar[str] = "event"
    """A stable short name: ``"won"``, ``"taken_over"``, ``"store_unavailable"``…"""
    level: ClassVar[int] = logging.INFO
    """The log level an operator would choose for it."""

    def message(self) -> str:
        """One line for a log, readable without the fields."""
        return self.type

    def fields(self) -> dict[str, Any]:
        """The event's values as ``relay_*`` keys (datetimes as ISO strings), plus its type."""
        values: dict[str, Any] = {"relay_event": self.type}
        for item in fields(self):
            if not item.metadata.get("field", True):
                continue
            value = getattr(self, item.name)
            if isinstance(value, datetime):
                value = format_slot(value)
            values[f"relay_{item.name}"] = value
        return values


@dataclass(frozen=True)
class RunEvent(Event):
    """An event about one run."""

    run_id: str
    job: str
    slot: datetime
    attempt: int
    token: int
    owner: str
    """The instance (or worker thread) the event is about."""


@dataclass(frozen=True)
class RunWon(RunEvent):
    """This instance won a new run (attempt 1): it will dispatch or run it."""

    type: ClassVar[str] = "won"

    def message(self) -> str:
        return f"won {self.run_id} (token {self.token})"


@dataclass(frozen=True)
class RunLost(RunEvent):
    """Another instance holds or finished this run: this instance does nothing with it."""

    type: ClassVar[str] = "lost"
    level: ClassVar[int] = logging.DEBUG

    def message(self) -> str:
        return f"lost {self.run_id} to another instance"


@dataclass(frozen=True)
class RunDispatched(RunEvent):
    """A won run was handed to its runner: published (Celery), enqueued (Dramatiq), or threaded."""

    type: ClassVar[str] = "dispatched"

    def message(self) -> str:
        return f"dispatched {self.run_id} (attempt {self.attempt}, token {self.token})"


@dataclass(frozen=True)
class RunStarted(RunEvent):
    """A runner started the run; ``start_delay`` is seconds from the slot to the start."""

    type: ClassVar[str] = "started"
    start_delay: float = 0.0

    def message(self) -> str:
        return (
            f"started {self.run_id} (attempt {self.attempt}, token {self.token}, "
            f"{self.start_delay:.3f}s after its slot)"
        )


@dataclass(frozen=True)
class RunSucceeded(RunEvent):
    """The attempt succeeded; ``duration`` is seconds from its start."""

    type: ClassVar[str] = "succeeded"
    duration: float = 0.0

    def message(self) -> str:
        return f"succeeded {self.run_id} in {self.duration:.3f}s (attempt {self.attempt})"


@dataclass(frozen=True)
class RunFailed(RunEvent):
    """The attempt failed. ``final``: it was the last of ``max_attempts``, the run is failed.

    ``max_attempts`` is 0 where the runner cannot know it (a message published by an older beat).
    """

    type: ClassVar[str] = "failed"
    level: ClassVar[int] = logging.ERROR
    max_attempts: int = 1
    error: str = ""
    duration: float = 0.0
    final: bool = False
    exception: BaseException | None = field(
        default=None, repr=False, compare=False, metadata={"field": False}
    )
    """The handler's exception, when it raised one: logged with its traceback, not a field."""

    def message(self) -> str:
        then = "no attempts left, the run is failed" if self.final else "it will be retried"
        of = f" of {self.max_attempts}" if self.max_attempts else ""
        return (
            f"failed {self.run_id}, attempt {self.attempt}{of}, "
            f"after {self.duration:.3f}s: {self.error} ({then})"
        )


@dataclass(frozen=True)
class RunRetried(RunEvent):
    """This instance leased a run again after a failed attempt; ``attempt`` is the new one."""

    type: ClassVar[str] = "retried"
    level: ClassVar[int] = logging.WARNING
    max_attempts: int = 1

    def message(self) -> str:
        return f"retrying {self.run_id}: attempt {self.attempt} of {self.max_attempts}"


@dataclass(frozen=True)
class RunTakenOver(RunEvent):
    """This instance took over a run whose runner stopped renewing its lease (died or froze)."""

    type: ClassVar[str] = "taken_over"
    level: ClassVar[int] = logging.WARNING
    previous_owner: str = ""
    previous_attempt: int = 0
    max_attempts: int = 1

    def message(self) -> str:
        return (
            f"took over {self.run_id} from {self.previous_owner or 'an unknown owner'}, whose "
            f"lease expired during attempt {self.previous_attempt}: now attempt {self.attempt} "
            f"of {self.max_attempts}, token {self.token}"
        )


@dataclass(frozen=True)
class RunPickedUp(RunEvent):
    """This instance leased a run another one handed over on a graceful stop (not a failure)."""

    type: ClassVar[str] = "picked_up"
    previous_owner: str = ""
    previous_attempt: int = 0

    def message(self) -> str:
        return (
            f"picked up {self.run_id}, handed over by {self.previous_owner or 'an unknown owner'} "
            f"during attempt {self.previous_attempt}: now attempt {self.attempt}, "
            f"token {self.token}"
        )


@dataclass(frozen=True)
class RunHandedOver(RunEvent):
    """A runner stopping gracefully gave the run back; any instance may lease it at once."""

    type: ClassVar[str] = "handed_over"

    def message(self) -> str:
        return f"handed over {self.run_id} (attempt {self.attempt}, token {self.token})"


@dataclass(frozen=True)
class RunAbandoned(RunEvent):
    """This runner gave up recording what became of the run: the store did not answer its
    ``operation`` (``finish``, after a few tries, or ``release``). ``outcome`` is what the attempt
    came to (``succeeded``, ``failed``; empty for a release). The lease runs out within ``lease``
    seconds and another instance takes the run over: an attempt that did its work runs again."""

    type: ClassVar[str] = "abandoned"
    level: ClassVar[int] = logging.ERROR
    operation: str = ""
    outcome: str = ""
    error: str = ""
    lease: float = 0.0

    def message(self) -> str:
        if self.operation == "release":
            what = f"could not hand over {self.run_id} (attempt {self.attempt})"
            then = "another instance takes it over then"
        else:
            what = (
                f"could not record that {self.run_id} {self.outcome} "
                f"(attempt {self.attempt}, token {self.token})"
            )
            then = (
                "another instance takes it over then and runs it again: keep the job idempotent, "
                "or fence its writes with run.token"
            )
        return (
            f"{what}: the store did not answer ({self.error}); its lease runs out within "
            f"{self.lease:g}s and {then}"
        )


@dataclass(frozen=True)
class RunLeaseLost(RunEvent):
    """This runner could not renew the run's lease before its time ran out (the store did not
    answer for ``silent_for`` seconds, longer than ``lease``), so it lets the run go: ``run.lost``
    is set and it heartbeats no more. Another instance may take the run over; the handler, told
    by ``run.lost`` / ``run.check()``, should stop. A finish it still records with its token is
    accepted if nobody took the run over meanwhile."""

    type: ClassVar[str] = "lease_lost"
    level: ClassVar[int] = logging.ERROR
    error: str = ""
    silent_for: float = 0.0
    lease: float = 0.0

    def message(self) -> str:
        return (
            f"let {self.run_id} go (attempt {self.attempt}, token {self.token}): its lease could "
            f"not be renewed for {self.silent_for:.1f}s, longer than the {self.lease:g}s lease "
            f"({self.error}); another instance may take it over, and run.lost tells the handler "
            "to stop"
        )


@dataclass(frozen=True)
class RunSkipped(RunEvent):
    """The run was recorded skipped and will never run; ``reason``: overlap, stale or paused."""

    type: ClassVar[str] = "skipped"
    level: ClassVar[int] = logging.WARNING
    reason: str = ""

    def message(self) -> str:
        return f"skipped {self.run_id}: {self.reason}"


@dataclass(frozen=True)
class RunBuffered(RunEvent):
    """The run waits (recorded pending) until the job's live run ends (``overlap="buffer_one"``)."""

    type: ClassVar[str] = "buffered"

    def message(self) -> str:
        return f"buffered {self.run_id}: it starts when the job's live run ends"


@dataclass(frozen=True)
class RunExhausted(RunEvent):
    """The run was recorded failed: its last allowed attempt died without finishing."""

    type: ClassVar[str] = "exhausted"
    level: ClassVar[int] = logging.ERROR
    max_attempts: int = 1

    def message(self) -> str:
        return (
            f"gave up on {self.run_id}: all {self.max_attempts} attempt(s) failed or died; "
            "the run is recorded failed"
        )


@dataclass(frozen=True)
class RunsMissed(Event):
    """Slots of ``job`` that passed while no instance ran it, too old to catch up: never run."""

    type: ClassVar[str] = "missed"
    level: ClassVar[int] = logging.WARNING
    job: str
    count: int
    first: datetime
    last: datetime
    owner: str

    def message(self) -> str:
        window = format_slot(self.first)
        if self.count > 1:
            window += f" .. {format_slot(self.last)}"
        return (
            f"missed {self.count} run(s) of {self.job} ({window}): no instance ran them in time "
            "(none was up, or every tick came too late) and they are older than the job's "
            "catch_up window; recorded skipped (missed). A larger catch_up runs such slots late"
        )


@dataclass(frozen=True)
class FencedOff(RunEvent):
    """The store refused a stale runner: ``operation`` is start, heartbeat, finish, release or
    write (a fenced write of :mod:`relay.fencing` refused inside the run)."""

    type: ClassVar[str] = "fenced_off"
    level: ClassVar[int] = logging.WARNING
    operation: str = ""
    detail: str = ""

    def message(self) -> str:
        return (
            f"refused the {self.operation} of {self.run_id} with token {self.token}: "
            f"{self.detail or 'a newer attempt owns the run'}"
        )


@dataclass(frozen=True)
class StoreUnavailable(Event):
    """The store could not be reached; the instance retries after ``retry_in`` seconds."""

    type: ClassVar[str] = "store_unavailable"
    level: ClassVar[int] = logging.ERROR
    backend: str
    owner: str
    error: str
    retry_in: float

    def message(self) -> str:
        return f"{self.backend} is unavailable ({self.error}); retrying in {self.retry_in:.1f}s"


@dataclass(frozen=True)
class StoreIncompatible(Event):
    """The store is at a layout that needs a newer Relay than this instance's
    (:class:`~relay.errors.StoreTooNew`): the instance decides nothing more, hands back what it
    won, and records the problem for ``relay health``. Once per instance."""

    type: ClassVar[str] = "store_incompatible"
    level: ClassVar[int] = logging.CRITICAL
    backend: str
    owner: str
    error: str

    def message(self) -> str:
        return f"this instance can no longer use {self.backend}: {self.error}"


@dataclass(frozen=True)
class StoreWaiting(Event):
    """The instance is starting and its store has not answered yet: it runs nothing, records no
    heartbeat, and tries again every ``retry_in`` seconds. Reported when it starts waiting, then
    every ``report_every`` seconds while it waits (a steady reminder, not one per try)."""

    type: ClassVar[str] = "store_waiting"
    level: ClassVar[int] = logging.WARNING
    backend: str
    owner: str
    error: str
    waited: float
    retry_in: float

    def message(self) -> str:
        since = f" for {self.waited:.0f}s" if self.waited else ""
        return (
            f"waiting{since} for {self.backend} to answer before starting ({self.error}); "
            f"trying again every {self.retry_in:g}s"
        )


@dataclass(frozen=True)
class StoreRecovered(Event):
    """The store answers again after ``down_for`` seconds. On a lease backend the instance
    takes no expired run over for ``takeover_in`` seconds more: runners cut off by the outage
    record their finishes first."""

    type: ClassVar[str] = "store_recovered"
    level: ClassVar[int] = logging.WARNING
    backend: str
    owner: str
    down_for: float
    takeover_in: float = 0.0

    def message(self) -> str:
        then = ""
        if self.takeover_in:
            then = f"; expired runs are taken over in {self.takeover_in:g}s"
        return f"{self.backend} answers again after {self.down_for:.1f}s{then}"


@dataclass(frozen=True)
class ScheduleApplied(Event):
    """This instance applied a change to a stored schedule (added, changed, paused, removed…).

    ``action`` is what the instance now does with it: ``scheduled`` (from its first slot after
    ``changed_at``, the change's time on the store's clock), ``paused``, ``ended`` or ``removed``.
    """

    type: ClassVar[str] = "schedule_applied"
    level: ClassVar[int] = logging.DEBUG
    schedule: str
    version: int
    action: str
    owner: str
    changed_at: datetime

    def message(self) -> str:
        return f"schedule {self.schedule!r} version {self.version}: {self.action}"


@dataclass(frozen=True)
class ScheduleNotRunnable(Event):
    """A stored schedule names a task this instance does not allow, or a code job's name.

    The instance does not run it (another instance that allows the task does); ``reason`` says
    why and how to fix it. Reported once per version of the schedule.
    """

    type: ClassVar[str] = "schedule_not_runnable"
    level: ClassVar[int] = logging.WARNING
    schedule: str
    version: int
    task: str
    owner: str
    reason: str

    def message(self) -> str:
        return f"schedule {self.schedule!r} (version {self.version}) not run here: {self.reason}"


@dataclass(frozen=True)
class JobOverdue(Event):
    """No run of ``job`` succeeded by the ``expected_by`` of its oldest slot not yet succeeded
    (``expect_success_within``, see :mod:`relay.overdue`). Emitted once per slot across the fleet
    where the store can mark it (every lease store Relay ships), by the first instance to see it.
    """

    type: ClassVar[str] = "job_overdue"
    level: ClassVar[int] = logging.ERROR
    job: str
    slot: datetime
    outcome: str
    """What became of ``slot``: ``failed``, ``missed``, ``stale``, ``running``, ``no record``…"""
    expected_by: datetime
    last_success: datetime | None
    owner: str

    def message(self) -> str:
        last = "never" if self.last_success is None else format_slot(self.last_success)
        return (
            f"job {self.job} is overdue: its slot {format_slot(self.slot)} ({self.outcome}) has "
            f"not succeeded by {format_slot(self.expected_by)}; last success {last}"
        )


@dataclass(frozen=True)
class JobFailing(Event):
    """``failures`` slots of ``job`` in a row ended failed, missed or stale, at least its
    ``alert_after_failures``. Emitted once per streak across the fleet, like :class:`JobOverdue`.
    """

    type: ClassVar[str] = "job_failing"
    level: ClassVar[int] = logging.ERROR
    job: str
    slot: datetime
    """The oldest slot of the streak (the first not succeeded since the last success)."""
    failures: int
    last_success: datetime | None
    owner: str

    def message(self) -> str:
        return (
            f"job {self.job} is failing: {self.failures} slot(s) in a row since "
            f"{format_slot(self.slot)} failed, were missed or went stale"
        )


@dataclass(frozen=True)
class JobRecovered(Event):
    """``job``, overdue or failing, succeeded again (its run of ``slot``). Emitted once per
    recovery across the fleet, like :class:`JobOverdue`."""

    type: ClassVar[str] = "job_recovered"
    level: ClassVar[int] = logging.WARNING
    job: str
    slot: datetime
    was: str
    """``overdue`` or ``failing``."""
    last_success: datetime | None
    owner: str

    def message(self) -> str:
        when = format_slot(self.slot)
        return f"job {self.job} recovered: its run of {when} succeeded ({self.was} before)"


@dataclass(frozen=True)
class DefinitionDeferred(Event):
    """Live instances hold another definition of ``job``, and theirs decides: not fired here.

    Reported when this instance stops firing the job, or when the deciding definition changes.
    ``ours`` and ``deciding`` are the two definitions' readable forms, ``ours_hash`` and
    ``deciding_hash`` their hashes; ``deciding_owner`` the instance whose declaration decided
    (the newest Relay release, then the latest started: see :mod:`relay.definitions`).
    """

    type: ClassVar[str] = "definition_deferred"
    level: ClassVar[int] = logging.WARNING
    job: str
    owner: str
    ours: str
    ours_hash: str
    deciding: str
    deciding_hash: str
    deciding_owner: str
    deciding_version: str

    def message(self) -> str:
        return (
            f"job {self.job!r} is not fired here: its definition here ({self.ours}, "
            f"{self.ours_hash}) differs from the one deciding it ({self.deciding}, "
            f"{self.deciding_hash}, declared by {self.deciding_owner}, Relay "
            f"{self.deciding_version}); finish the rollout, or stop the instances holding the "
            "other definition"
        )


@dataclass(frozen=True)
class DefinitionResumed(Event):
    """This instance fires ``job`` again: its definition (``ours``) decides it now."""

    type: ClassVar[str] = "definition_resumed"
    level: ClassVar[int] = logging.INFO
    job: str
    owner: str
    ours: str
    ours_hash: str

    def message(self) -> str:
        return f"job {self.job!r} is fired here again with its definition here ({self.ours})"


E = TypeVar("E", bound=Event)


class Subscribable(Protocol):
    """What a subscriber (metrics, tracing) attaches to: an EventBus, a scheduler, a Celery or
    Dramatiq hook."""

    def on(self, event_type: type[E], callback: Callable[[E], object]) -> Callable[[], None]:
        """Call ``callback`` for every event of ``event_type``; return an unsubscribe function."""
        ...


_loggers: dict[str, logging.Logger] = {}


def logger_for(event_type: type[Event]) -> logging.Logger:
    """The logger of an event type: ``relay.events.<type>``, such as ``relay.events.failed``."""
    name = event_type.type
    logger = _loggers.get(name)
    if logger is None:
        logger = _loggers[name] = logging.getLogger(f"{log.name}.{name}")
    return logger


def log_event(event: Event) -> None:
    """Log ``event`` at its level on its type's logger, with :meth:`Event.fields` as ``extra``.

    A failed attempt's exception is logged with its traceback.
    """
    logger = logger_for(type(event))
    if logger.isEnabledFor(event.level):
        exception = getattr(event, "exception", None)
        logger.log(event.level, event.message(), extra=event.fields(), exc_info=exception)


class EventBus:
    """Delivers each emitted event to the callbacks subscribed to its type or a base type.

    Callbacks run in the emitting thread, in subscription order. A callback that raises is logged
    (logger ``relay.events``) and skipped: it never breaks a run or the loop. ``log``: subscribe
    :func:`log_event` first, so every event is logged (the default).
    """

    def __init__(self, *, log: bool = True) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[tuple[type[Event], Callable[[Any], object]]] = []
        if log:
            self.on(Event, log_event)

    def on(self, event_type: type[E], callback: Callable[[E], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event of ``event_type`` (or a subclass).

        ``on(Event, cb)`` receives everything; ``on(RunEvent, cb)`` every run event. Returns a
        function that unsubscribes.
        """
        if not (isinstance(event_type, type) and issubclass(event_type, Event)):
            raise TypeError(f"on() takes an event class from relay.events, got {event_type!r}")
        entry: tuple[type[Event], Callable[[Any], object]] = (event_type, callback)
        with self._lock:
            self._subscribers = [*self._subscribers, entry]

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s is not entry]

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to its subscribers; never raises."""
        for event_type, callback in self._subscribers:
            if isinstance(event, event_type):
                try:
                    callback(event)
                except Exception:
                    log.exception("a relay event callback failed on %s; ignored", event.type)

    def wants(self, event_type: type[Event]) -> bool:
        """Whether any callback would receive an event of ``event_type`` (to skip building it)."""
        return any(
            issubclass(event_type, t) or issubclass(t, event_type) for t, _ in self._subscribers
        )
