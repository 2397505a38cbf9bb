"""Runs: one firing of one job, named by ``(job name, slot)`` alone."""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple, overload

from relay.errors import ConfigurationError, LeaseLost

__all__ = [
    "AWARE_HINT",
    "MANUAL",
    "Run",
    "RunMessage",
    "RunRecord",
    "RunState",
    "check_slot",
    "check_slots",
    "format_slot",
    "from_ms",
    "is_manual",
    "max_attempts_from_headers",
    "message_from_headers",
    "parse_run_id",
    "run_from_headers",
    "run_id",
    "run_to_headers",
    "slot_ms",
    "won_run",
]

UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


AWARE_HINT = "pass an aware datetime, such as datetime.now(timezone.utc)"


def check_slot(slot: object) -> datetime:
    """Return ``slot`` if it is a timezone-aware datetime; else raise ``ConfigurationError``.

    A naive datetime would be read in each host's own zone, so two hosts would name different runs.
    """
    if not isinstance(slot, datetime):
        raise ConfigurationError(
            f"a slot must be a datetime, not {type(slot).__name__}: {AWARE_HINT}"
        )
    if slot.tzinfo is None or slot.utcoffset() is None:
        raise ConfigurationError(
            f"slot {slot.isoformat()} is a naive datetime, which each host would read in its own "
            f"time zone: {AWARE_HINT}"
        )
    return slot


def check_slots(runs: Iterable[tuple[str, datetime]]) -> None:
    """:func:`check_slot` for each ``(job, slot)`` of a batch, before a backend writes any of it."""
    for _, slot in runs:
        if getattr(slot, "tzinfo", None) is not UTC:
            check_slot(slot)


def format_slot(slot: datetime) -> str:
    """The slot as an exact UTC string: seconds, or milliseconds where the slot has them."""
    if getattr(slot, "tzinfo", None) is not UTC:
        check_slot(slot)
        slot = slot.astimezone(UTC)
    # isoformat() ends with "+00:00"; "Z" replaces it.
    return slot.isoformat(timespec="milliseconds" if slot.microsecond else "seconds")[:-6] + "Z"


MANUAL = "manual:"
"""What starts the part after ``@`` of a manual run's id (``relay trigger``), before its time."""


def run_id(job: str, slot: datetime, *, manual: bool = False) -> str:
    """The id every instance derives for ``job`` at ``slot``: ``"job@2026-11-29T21:30:00Z"``.

    A manual run (``manual=True``, ``slot`` the time it was triggered) is named
    ``"job@manual:2026-11-29T21:30:05.120Z"``: it can never be mistaken for a slot's run.
    """
    return f"{job}@{MANUAL if manual else ''}{format_slot(slot)}"


def is_manual(value: str) -> bool:
    """Whether a run id names a manual run."""
    return value.rpartition("@")[2].startswith(MANUAL)


_WRITTEN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{3})?")
"""A slot as :func:`format_slot` writes it, without its ``Z``."""


def parse_run_id(value: str) -> tuple[str, datetime]:
    """Split a run id back into its job name and slot (a manual run's: when it was triggered)."""
    job, _, stamp = str(value).rpartition("@")
    stamp = stamp.removeprefix(MANUAL)
    text = stamp[:-1]
    if job and stamp.endswith("Z") and _WRITTEN.fullmatch(text):
        # What format_slot wrote: fromisoformat reads it as strptime below would, in a fraction
        # of strptime's 20 µs (a step on Redis or NATS KV parses its run id). An impossible date
        # falls through to strptime and its message.
        try:
            return job, datetime.fromisoformat(text).replace(tzinfo=UTC)
        except ValueError:
            pass
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    try:
        if not job or not stamp.endswith("Z"):
            raise ValueError("no 'job@…Z'")
        return job, datetime.strptime(text, fmt).replace(tzinfo=UTC)
    except ValueError:
        raise ConfigurationError(
            f"not a run id: {value!r}; a run id is 'job@2026-11-29T21:30:00Z' (job, '@', UTC slot)"
        ) from None


def slot_ms(slot: datetime) -> int:
    """The slot in whole milliseconds since the Unix epoch, as stores keep it."""
    if getattr(slot, "tzinfo", None) is not UTC:
        check_slot(slot)
    return round(slot.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """The UTC datetime ``ms`` milliseconds after the Unix epoch (exact, no float rounding)."""
    return _EPOCH + timedelta(milliseconds=ms)


class RunState(str, enum.Enum):
    """Where a run stands in a lease store."""

    RUNNING = "running"
    """Leased to an owner until its lease expires (it may still be waiting in a queue)."""
    PENDING = "pending"
    """Waiting for any instance to lease it: handed over, failed with attempts left, or created
    by an operator (``reason``: ``manual``, ``backfill``, ``resumed``) or by ``buffer_one``
    (``buffered``: leased once no other run of the job holds a live lease)."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Failed, or abandoned, on its last allowed attempt."""
    SKIPPED = "skipped"
    """Never run; ``reason`` says why: ``overlap``, ``missed``, ``stale`` or ``paused``."""

    @property
    def final(self) -> bool:
        """Whether the run can never be leased again."""
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.SKIPPED)


class _LostEvent:
    """:attr:`Run.lost`: the ``threading.Event`` made on first access, not with every ``Run``.

    A tick of 10,000 won runs made 10,000 events (a lock and a condition each) that a runner
    would mostly never look at. Passed in (``Run(..., lost=event)``, ``dataclasses.replace``),
    the given event is the run's, as before.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    @overload
    def __get__(self, run: None, owner: type) -> _LostEvent: ...
    @overload
    def __get__(self, run: Run, owner: type) -> threading.Event: ...
    def __get__(self, run: Run | None, owner: type) -> _LostEvent | threading.Event:
        if run is None:
            return self  # the dataclass's default: no event given
        event: threading.Event | None = run.__dict__.get(self._slot)
        if event is None:
            # setdefault is atomic: two threads asking at once get the same event.
            event = run.__dict__.setdefault(self._slot, threading.Event())
        return event

    def __set__(self, run: Run, value: threading.Event | _LostEvent) -> None:
        if isinstance(value, threading.Event):
            run.__dict__[self._slot] = value  # frozen: set once, by __init__


@dataclass(frozen=True)
class Run:
    """One run a process holds: what a handler receives.

    ``token`` is the fencing token of this lease: it grows strictly with every new lease of the
    same job, so a resource that stores the highest token it has seen can refuse a stale writer.
    On a claim backend there is no lease and ``token`` is 0.
    """

    id: str
    job: str
    scheduled_for: datetime
    attempt: int
    token: int
    owner: str
    lost: _LostEvent = field(default=_LostEvent(), compare=False, repr=False)
    """Set by the runner once this attempt no longer owns the run: its lease could not be
    renewed before it ran out, or the store gave the run to a newer token. A long handler
    checks it (or calls :meth:`check`) and stops: whatever it does after that may be done
    again by the attempt that took the run over."""

    args: tuple[Any, ...] = ()
    """A stored schedule's arguments (:mod:`relay.stored`), as stored when the run was won."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    """A stored schedule's keyword arguments, as stored when the run was won."""
    schedule_version: int | None = None
    """The version of the stored schedule the run was won with (``None``: a code job)."""

    def check(self) -> None:
        """Raise :class:`~relay.errors.LeaseLost` if this attempt no longer owns the run.

        Call it between the steps of a long handler, so it stops on its own once another
        instance may have taken the run over.
        """
        if self.lost.is_set():
            raise LeaseLost(
                f"run {self.id} (token {self.token}) is no longer owned by this attempt: its "
                "lease could not be renewed, or another instance took the run over"
            )


def won_run(
    run_id: str,
    job: str,
    scheduled_for: datetime,
    attempt: int,
    token: int,
    owner: str,
    schedule_version: int | None = None,
) -> Run:
    """``Run(run_id, job, scheduled_for, attempt, token, owner, schedule_version=…)``, made
    without the dataclass's ``__init__``: a backend deciding a tick builds thousands at once.

    The run is equal to the one ``Run(...)`` makes, with no ``args`` or ``kwargs`` and its
    ``lost`` event made on first access.
    """
    run = _new(Run)
    _set(run, "id", run_id)
    _set(run, "job", job)
    _set(run, "scheduled_for", scheduled_for)
    _set(run, "attempt", attempt)
    _set(run, "token", token)
    _set(run, "owner", owner)
    _set(run, "args", ())
    _set(run, "kwargs", {})
    _set(run, "schedule_version", schedule_version)
    return run


# Attributes set one by one keep the instance's compact layout; a dict given at once does not.
_new = object.__new__
_set = object.__setattr__


@dataclass(frozen=True)
class RunRecord:
    """What a lease store knows of one run, for status displays and sweeps."""

    id: str
    job: str
    scheduled_for: datetime
    state: RunState
    attempt: int
    failures: int
    token: int
    owner: str | None
    reason: str | None
    expires_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None = None
    """The error its last failed attempt reported, if any."""
    schedule_version: int | None = None
    """The version of the stored schedule the run was first leased with (``None``: a code job,
    or a run not leased yet)."""


HEADER = "relay_run"
"""The message header (Celery) or message option (Dramatiq) that carries a run."""


def run_to_headers(run: Run, *, max_attempts: int = 0) -> dict[str, str | int]:
    """The run as plain values for a message header, so a worker can start it with its token.

    ``max_attempts`` (the job's, when known) lets the worker report "attempt n of m". A stored
    schedule's run also carries its ``schedule_version`` (a code job's header has none).
    """
    values: dict[str, str | int] = {
        "id": run.id, "token": run.token, "attempt": run.attempt, "owner": run.owner,
    }  # fmt: skip
    if max_attempts:
        values["max_attempts"] = max_attempts
    if run.schedule_version is not None:
        values["schedule_version"] = run.schedule_version
    return values


def max_attempts_from_headers(values: object) -> int:
    """The job's ``max_attempts`` a run header carries, or 0 if it carries none."""
    try:
        return int(values.get("max_attempts", 0)) if isinstance(values, dict) else 0
    except (TypeError, ValueError):
        return 0


def run_from_headers(values: object) -> Run | None:
    """The run a message carries, or ``None`` if the message carries none (or a malformed one)."""
    if not isinstance(values, dict):
        return None
    try:
        job, slot = parse_run_id(str(values["id"]))
        version = values.get("schedule_version")
        return Run(
            str(values["id"]), job, slot, int(values["attempt"]), int(values["token"]),
            str(values["owner"]), schedule_version=None if version is None else int(version),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


class RunMessage(NamedTuple):
    """What a run message's header carries, read once where the message arrives."""

    run: Run
    max_attempts: int
    """The job's ``max_attempts`` (0 if the header carries none)."""


def message_from_headers(values: object) -> RunMessage | None:
    """The run and ``max_attempts`` a message header carries, or ``None`` (none, or malformed)."""
    run = run_from_headers(values)
    return None if run is None else RunMessage(run, max_attempts_from_headers(values))
