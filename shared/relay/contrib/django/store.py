"""Relay's store as the Django app sees it: the backend ``settings.RELAY`` names, read through
Relay's API (:class:`relay.Control` and the lease contract, opened read-only for pages and
listings), so every lease backend works.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from relay.backends import open_backend
from relay.contract import LeaseBackend, is_lease
from relay.control import Control, JobStatus
from relay.control_schedules import describe
from relay.errors import ConfigurationError
from relay.overdue import STATES, JobHealth
from relay.settings import django_backend, from_django
from relay.stored import Schedule, schedule_job

__all__ = ["JobRow", "ScheduleRow", "backend_url", "job_rows", "read_store", "schedule_rows"]


def backend_url() -> str:
    """The URL of Relay's store: ``RELAY["BACKEND"]`` (``"django"`` resolved), else
    ``CELERY_RELAY_BACKEND``; ``ConfigurationError`` naming both when neither is set."""
    from django.conf import settings

    url = from_django().backend or getattr(settings, "CELERY_RELAY_BACKEND", None)
    if not url:
        raise ConfigurationError(
            "Relay's pages and relay_* commands read the store settings.RELAY['BACKEND'] names "
            "(or CELERY_RELAY_BACKEND), and neither is set: set RELAY['BACKEND'] to the store "
            "your schedulers use, such as 'django' or 'redis://localhost:6379/0'"
        )
    return str(django_backend({"BACKEND": url})["BACKEND"])


@contextmanager
def read_store() -> Iterator[LeaseBackend]:
    """The store opened read-only (nothing is created); closed afterwards."""
    backend = open_backend(backend_url(), read_only=True)
    try:
        if not is_lease(backend):  # open_backend refuses claim stores read-only; this tells mypy
            raise ConfigurationError(f"{backend.name} is a claim backend: it records no runs")
        yield backend
    finally:
        backend.close()


@dataclass(frozen=True)
class JobRow:
    """A job as the admin lists it: its :class:`~relay.control.JobStatus` (whose fields it
    answers too) and its standing against its expectations (:mod:`relay.overdue`)."""

    status: JobStatus
    health: JobHealth | None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.status, name)


def job_rows(backend: LeaseBackend) -> list[JobRow]:
    """Every job the store knows, overdue and failing ones first, then by name: its standing,
    last success and next expected one, schedule, next due, last run, live leases, pause."""
    control = Control(backend)
    health = {h.job: h for h in control.health()}
    rows = [JobRow(status, health.get(status.name)) for status in control.jobs()]
    last = len(STATES)
    return sorted(
        rows, key=lambda r: (STATES.index(r.health.state) if r.health else last, r.status.name)
    )


@dataclass(frozen=True)
class ScheduleRow:
    """A stored schedule as the admin lists it, with what ``relay jobs`` says of it."""

    schedule: Schedule
    when: str
    """When it is due, as ``relay schedules list`` says it."""
    next_due: datetime | None
    """Its next slot: as ``relay jobs`` says it, else (no instance registered it yet) by its
    definition; ``None`` when disabled or ended."""
    state: str
    """Where it can run and what remains, or why it cannot run (``JobStatus.stored``)."""


def schedule_rows(backend: LeaseBackend) -> list[ScheduleRow]:
    """Every stored schedule, by name, with its next slot and its runnable state."""
    control = Control(backend)
    jobs = {status.name: status for status in control.jobs()}
    rows = []
    for schedule in control.schedules():
        status = jobs.get(schedule.name)
        next_due = status.next_due if status else None
        if next_due is None and schedule.enabled:
            next_due = _next_slot(backend, schedule)
        state = (status.stored or "") if status else ""
        rows.append(ScheduleRow(schedule, describe(schedule), next_due, state))
    return rows


def _next_slot(backend: LeaseBackend, schedule: Schedule) -> datetime | None:
    """The first slot of ``schedule`` after now, within a century (jitter left out)."""
    now = backend.now()
    slots = schedule_job(backend, schedule, None).schedule
    return next(iter(slots.slots_between(now, now + timedelta(days=36525))), None)
