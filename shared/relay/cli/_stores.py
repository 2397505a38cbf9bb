"""How a ``relay`` command opens the store ``--backend`` names: read-only for the commands that
only read (a URL that names no store fails and creates nothing), or through :class:`relay.Control`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import click

from relay.backends import Backend, open_backend
from relay.contract import LeaseBackend, is_lease
from relay.control import Control
from relay.runs import RunRecord

__all__ = ["RunsReader", "control", "read_only", "read_runs"]


@runtime_checkable
class RunsReader(Protocol):
    """What ``relay runs`` reads: a lease store, or RabbitMQ consumer mode's outcomes stream."""

    @property
    def name(self) -> str: ...

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]: ...

    def close(self) -> None: ...


@contextmanager
def _opened(url: str) -> Iterator[Backend]:
    """The store a URL names, opened read-only and closed after."""
    backend = open_backend(url, read_only=True)
    try:
        yield backend
    finally:
        backend.close()


@contextmanager
def read_runs(url: str) -> Iterator[RunsReader]:
    """Like :func:`read_only`, also for a claim backend that records outcomes it can read."""
    with _opened(url) as backend:
        if not isinstance(backend, RunsReader):
            raise click.ClickException(f"{backend.name} is a claim backend: it records no runs")
        yield backend


@contextmanager
def read_only(url: str) -> Iterator[LeaseBackend]:
    """The lease store a URL names, opened read-only."""
    with _opened(url) as backend:
        if not is_lease(backend):  # open_backend refuses them; this tells mypy
            raise click.ClickException(f"{backend.name} is a claim backend: it records no runs")
        yield backend


@contextmanager
def control(url: str, *, read_only: bool = False) -> Iterator[Control]:
    """A :class:`Control` on ``url``, closed after."""
    with Control(url, read_only=read_only) as opened:
        yield opened
