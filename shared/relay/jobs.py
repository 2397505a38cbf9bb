"""Jobs: the definition of a periodic task, validated once when it is created."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import PurePath
from typing import Any, Literal

from relay.arguments import NAME_MAX
from relay.contract import ClaimBackend, LeaseBackend
from relay.deadlines import check_deadline
from relay.durations import (
    MIN_HEARTBEAT,
    MIN_LEASE,
    MIN_TICK,
    Duration,
    at_least,
    non_negative_seconds,
    seconds,
)
from relay.errors import ConfigurationError, UnsupportedOption
from relay.expectations import Within, check_alert_after_failures, check_expect_success_within
from relay.runs import format_slot
from relay.schedules import BoundedSchedule, CronSchedule, EverySchedule, Schedule, make_schedule

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_RETENTION",
    "LEASE_BACKENDS",
    "TICK_SPREAD",
    "Job",
    "Overlap",
    "check_handler",
    "check_instance_options",
    "check_retention",
    "check_scheduler_options",
    "check_tick",
    "jitter_delay",
    "job_spec",
    "make_job",
]

Overlap = Literal["allow", "skip", "buffer_one"]
OVERLAPS = ("allow", "skip", "buffer_one")
TICK_SPREAD = 5.0
"""Seconds that instances' ticks may lag one another; a claim's memory must cover it."""
DEFAULT_RETENTION = 30 * 24 * 3600.0
"""Seconds a lease store keeps a finished run by default before a sweep prunes it (30 days)."""
DEFAULT_MAX_ATTEMPTS = 3
"""Attempts a run gets by default: a failure and a dead runner each use one."""

LEASE_BACKENDS = (
    "sqlite:///…",
    "postgresql://…",
    "redis://… (strategy=lease)",
    "nats://… (strategy=kv)",
)
"""URL forms of the lease backends, for messages that point users to them."""


@dataclass(frozen=True, slots=True)  # 100,000 jobs: no __dict__ each
class Job:
    """A periodic task: its name, its schedule, and what a lease backend should enforce for it.

    ``handler`` is the function the standalone scheduler calls; integrations keep their own task
    or actor and leave it ``None``.
    """

    name: str
    schedule: Schedule
    handler: Callable[..., Any] | None = None
    overlap: Overlap = "allow"
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    catch_up: float = 0.0
    stale_after: float | None = None
    jitter: float = 0.0
    """Each slot starts up to this many seconds late: see :func:`jitter_delay`."""
    expect_success_within: Within = None
    """Seconds after its slot by which a run should have succeeded, else the job is overdue;
    ``None``: derived from the schedule, ``False``: never (see :mod:`relay.expectations`)."""
    alert_after_failures: int | None = None
    """Slots in a row ending failed, missed or stale that make the job failing (``None``: never)."""


def jitter_delay(job: str, slot: datetime, jitter: float) -> float:
    """Seconds the run of ``job`` at ``slot`` waits after its slot: in ``[0, jitter)``.

    A hash of the run's id, so every instance computes the same delay, and runs of many jobs due
    at the same minute spread over the window instead of stampeding. The run id stays the slot.
    """
    if jitter <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{job}@{format_slot(slot)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * jitter


def job_spec(job: Job) -> str:
    """The job's definition as JSON, as schedulers register it with a lease store.

    ``relay jobs`` shows it, and :class:`relay.Control` rebuilds the schedule from it (backfill).
    """
    spec: dict[str, Any] = {"schedule": job.schedule.describe()}
    schedule = job.schedule
    if isinstance(schedule, BoundedSchedule):  # a stored schedule: see relay.stored
        spec["stored"] = True
        schedule = schedule.inner
    if isinstance(schedule, CronSchedule):
        spec.update(cron=schedule.expression, tz=str(schedule.tz))
    elif isinstance(schedule, EverySchedule):
        spec["every"] = schedule.interval
    spec.update(
        overlap=job.overlap, max_attempts=job.max_attempts, catch_up=job.catch_up,
        stale_after=job.stale_after, jitter=job.jitter,
    )  # fmt: skip
    # Only when set: a job without them registers the definition it always did.
    if job.expect_success_within is not None:
        spec["expect_success_within"] = job.expect_success_within
    if job.alert_after_failures is not None:
        spec["alert_after_failures"] = job.alert_after_failures
    return json.dumps(spec, sort_keys=True)


def make_job(
    backend: ClaimBackend | LeaseBackend,
    *,
    name: str,
    handler: Callable[..., Any] | None = None,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | tzinfo | None = None,
    overlap: Overlap | None = None,
    max_attempts: int | None = None,
    catch_up: Duration | None = None,
    stale_after: Duration | None = None,
    jitter: Duration | None = None,
    schedule: Schedule | None = None,
    expect_success_within: Duration | Literal[False] | None = None,
    alert_after_failures: int | None = None,
) -> Job:
    """Validate a job's options against its backend and build it.

    ``schedule``, a schedule built already (a stored schedule's window, see :mod:`relay.stored`),
    takes the place of ``cron``, ``every`` and ``tz``.

    Options left ``None`` take their defaults. On a claim backend, ``overlap``, ``max_attempts`` and
    ``catch_up`` raise :class:`UnsupportedOption`: only a lease can honour them. ``jitter``
    (seconds) delays each slot's start by :func:`jitter_delay`; it must be shorter than
    ``stale_after``, which counts from the slot. ``expect_success_within`` and
    ``alert_after_failures`` (see :mod:`relay.expectations`) need a store that keeps outcomes:
    a claim backend raises :class:`UnsupportedOption` for them (``False`` is accepted anywhere).
    """
    if not isinstance(name, str) or not name or "@" in name or not name.isprintable():
        raise ConfigurationError(
            f"job name {name!r} must be a non-empty string without '@' or control characters"
        )
    if len(name) > NAME_MAX:
        raise ConfigurationError(
            f"job name {name[:40]!r}… is {len(name)} characters: at most {NAME_MAX}"
        )
    if schedule is None:
        schedule = make_schedule(cron=cron, every=every, tz=tz, job=name)
    stale = (
        None
        if stale_after is None
        else at_least(stale_after, "stale_after", TICK_SPREAD, _SHORT_STALE_AFTER)
    )
    if backend.capability == "claim":
        # A claim backend may honour some of them its own way (RabbitMQ consumer mode:
        # max_attempts as its run queue's delivery limit); it lists them in ``job_options``.
        honoured: frozenset[str] = getattr(backend, "job_options", frozenset())
        lease_only = {
            "overlap": overlap, "max_attempts": max_attempts, "catch_up": catch_up,
            "expect_success_within": None if expect_success_within is False
            else expect_success_within,
            "alert_after_failures": alert_after_failures,
        }  # fmt: skip
        for option, value in lease_only.items():
            if value is not None and option not in honoured:
                raise UnsupportedOption(option, backend.name, LEASE_BACKENDS)
        _check_claim_memory(backend, stale)
    if overlap is not None and overlap not in OVERLAPS:
        raise ConfigurationError(
            f"overlap={overlap!r} is not known: use 'allow' or 'skip', or 'buffer_one'"
        )
    jitter_s = non_negative_seconds(jitter or 0, "jitter")
    if jitter_s and stale is not None and jitter_s >= stale:
        raise ConfigurationError(
            f"jitter={jitter_s:g}s is not shorter than stale_after={stale:g}s: a delayed run "
            "would be stale before it starts; lower jitter or raise stale_after"
        )
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise ConfigurationError(f"max_attempts={max_attempts!r} must be a whole number >= 1")
    within = check_expect_success_within(expect_success_within)
    failures = check_alert_after_failures(alert_after_failures)
    return Job(
        name=name,
        schedule=schedule,
        handler=handler,
        overlap=overlap or "allow",
        max_attempts=max_attempts or DEFAULT_MAX_ATTEMPTS,
        catch_up=non_negative_seconds(catch_up or 0, "catch_up"),
        stale_after=stale,
        jitter=jitter_s,
        expect_success_within=within,
        alert_after_failures=failures,
    )


def _check_claim_memory(backend: ClaimBackend, stale_after: float | None) -> None:
    """Refuse a ``stale_after`` the backend forgets claims before: a run could be won twice."""
    if stale_after is None:  # nothing to check: the store need not answer (it may be down)
        return
    memory = backend.remembers_for
    if memory is None or stale_after + TICK_SPREAD <= memory:
        return
    raise ConfigurationError(
        f"stale_after={stale_after:g}s is too long for {backend.name}: it remembers a claim for "
        f"{memory:g}s, and a run claimed after that could be won twice. Make the backend remember "
        f"at least {stale_after + TICK_SPREAD:g}s (stale_after plus {TICK_SPREAD:g}s of tick "
        "spread; URL option window=… for NATS, retention=… for Redis and RabbitMQ), "
        "or lower stale_after"
    )


def check_scheduler_options(
    backend: ClaimBackend | LeaseBackend, *, lease: Duration | None, heartbeat: Duration | None
) -> tuple[float, float]:
    """Validate ``lease`` and ``heartbeat`` (seconds) against the backend; return them as floats.

    On a claim backend both must be left out. On a lease backend they default to 30 s and a third
    of the lease (at most 10 s); the lease is at least :data:`~relay.durations.MIN_LEASE` (1 s),
    the heartbeat at least :data:`~relay.durations.MIN_HEARTBEAT` (0.1 s) and shorter than the
    lease, so a live runner renews before it expires. A queue lease (Celery, Dramatiq) must be at
    least the lease, so these floors hold for it too. One store call must end within the lease
    (:func:`relay.deadlines.check_deadline`: refused if the URL's ``timeout`` says otherwise).
    """
    if backend.capability == "claim":
        for option, value in {"lease": lease, "heartbeat": heartbeat}.items():
            if value is not None:
                raise UnsupportedOption(option, backend.name, LEASE_BACKENDS)
        return 0.0, 0.0
    lease_s = 30.0 if lease is None else at_least(lease, "lease", MIN_LEASE, _SHORT_LEASE)
    heartbeat_s = (
        min(10.0, lease_s / 3)
        if heartbeat is None
        else at_least(heartbeat, "heartbeat", MIN_HEARTBEAT, _SHORT_HEARTBEAT)
    )
    if heartbeat_s >= lease_s:
        raise ConfigurationError(
            f"heartbeat ({heartbeat_s:g}s) must be shorter than lease ({lease_s:g}s), "
            "or a live runner loses its lease between two heartbeats: "
            "a third of the lease is a good heartbeat"
        )
    check_deadline(backend, lease_s)
    return lease_s, heartbeat_s


def check_retention(
    backend: ClaimBackend | LeaseBackend, retention: Duration | Literal["never"] | None
) -> float | None:
    """Seconds finished runs are kept (``None``: for ever); refused on a claim backend.

    ``None`` gives :data:`DEFAULT_RETENTION` on a lease backend; ``"never"`` never prunes.
    """
    if backend.capability == "claim":
        if retention is not None:
            raise UnsupportedOption("retention", backend.name, LEASE_BACKENDS)
        return None
    if retention == "never":
        return None
    if retention is None:
        return DEFAULT_RETENTION
    value = seconds(retention, "retention")
    if value <= 0:
        raise ConfigurationError(f"retention={retention!r} must be longer than 0 s, or 'never'")
    return value


def check_tick(tick: Duration | None, default: float = 1.0) -> float:
    """Validate how often an instance looks for due runs (seconds); ``None`` gives ``default``."""
    if tick is None:
        return default
    return at_least(tick, "tick", MIN_TICK, "a faster tick only spends CPU; 1 s is the default")


_SHORT_LEASE = (
    "a lease this short can expire during one slow round trip or pause of a live runner, and "
    "another instance then runs the run again; the default is 30 s"
)
_SHORT_STALE_AFTER = (
    "a run not decided this soon after its slot is recorded stale and never runs, and instances' "
    "ticks may lag one another by this much"
)
_SHORT_HEARTBEAT = (
    "each heartbeat writes to the store for every running run; the default is a third of the lease"
)


def check_instance_options(
    backend: object, owner: object, max_workers: object, clock: object
) -> None:
    """Refuse, with the fix, a standalone scheduler's options that no backend needs to judge."""
    if not isinstance(backend, str) and getattr(backend, "capability", None) not in (
        "claim",
        "lease",
    ):
        hint = ""
        if isinstance(backend, PurePath):
            hint = f" (for this SQLite file: 'sqlite:///{backend}')"
        raise ConfigurationError(
            f"backend {backend!r} is neither a URL nor a backend: pass a URL such as "
            f"'sqlite:///relay.db'{hint}, or an object from relay.open_backend(url)"
        )
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise ConfigurationError(f"owner={owner!r} must be a non-empty string, or None")
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ConfigurationError(
            f"max_workers={max_workers!r} must be a whole number >= 1: how many runs may "
            "execute at once in this instance"
        )
    if not callable(clock):
        raise ConfigurationError(f"clock={clock!r} must be a function returning epoch seconds")


def check_handler(handler: object, name: str | None) -> None:
    """Refuse a handler that cannot be called with the run: each attempt would fail."""
    if not callable(handler):
        raise ConfigurationError(
            f"@scheduler.job(...) decorates a function taking the run, not {handler!r}"
        )
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check
        return
    try:
        signature.bind(None)
    except TypeError:
        label = name or getattr(handler, "__qualname__", repr(handler))
        raise ConfigurationError(
            f"job {label!r}: its function must accept the run as one argument, "
            f"as in def {getattr(handler, '__name__', 'handler')}(run: relay.Run) -> None"
        ) from None
