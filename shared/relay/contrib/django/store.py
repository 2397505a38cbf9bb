"""Relay's store as the Django app sees it: the backend ``settings.RELAY`` names, read through the
lease contract (opened read-only for pages and listings), so every lease backend works.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from relay.backends import open_backend
from relay.contract import LeaseBackend, is_lease
from relay.errors import ConfigurationError
from relay.runs import RunRecord, RunState
from relay.settings import django_backend, from_django

__all__ = ["JobRow", "backend_url", "job_rows", "read_store"]

RECENT = 2000
"""How many of the latest runs the jobs page reads to find each job's last and live runs."""


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
    """One job on the jobs page: its latest run, its live runs and whether it is paused."""

    name: str
    last: RunRecord | None
    live: tuple[RunRecord, ...]
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_reason: str | None = None

    @property
    def paused(self) -> bool:
        """Whether the job is paused (on a store with a control plane)."""
        return self.paused_at is not None


def job_rows(backend: LeaseBackend, recent: int = RECENT) -> list[JobRow]:
    """Every job the store knows, by name: those registered (where the store keeps a registry)
    and those with a run among the ``recent`` latest."""
    runs = backend.runs(None, recent)
    by_job: dict[str, list[RunRecord]] = {}
    for record in runs:
        by_job.setdefault(record.job, []).append(record)
    infos = {getattr(info, "name", ""): info for info in _registered(backend)}
    rows = []
    for name in sorted({*by_job, *infos}):
        # A registered job with no run among the recent ones (a daily job among busy ones).
        records = by_job.get(name) or backend.runs(name, 1)
        info = infos.get(name)
        rows.append(
            JobRow(
                name=name,
                last=records[0] if records else None,
                live=tuple(r for r in records if r.state in (RunState.RUNNING, RunState.PENDING)),
                paused_at=getattr(info, "paused_at", None),
                paused_by=getattr(info, "paused_by", None),
                paused_reason=getattr(info, "paused_reason", None),
            )
        )
    return rows


def _registered(backend: LeaseBackend) -> list[object]:
    """The store's job registry where it has one (the control plane's ``jobs()``), else none."""
    jobs = getattr(backend, "jobs", None)
    return list(jobs()) if callable(jobs) else []
