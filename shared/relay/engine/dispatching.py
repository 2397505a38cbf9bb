"""The dispatcher seam: a backend that hands runs out itself instead of the scheduler's threads.

The standalone scheduler runs what it wins in its own threads. A backend that is also a
:class:`Dispatcher` (RabbitMQ in consumer mode) takes the won runs instead — it publishes them —
and runs its own consumers, which call the jobs' handlers as the broker hands the runs out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from relay.engine.deciding import Won
from relay.events import EventBus
from relay.jobs import Job

__all__ = ["Dispatcher"]


@runtime_checkable
class Dispatcher(Protocol):
    """Takes the runs a scheduler wins and runs them wherever it decides."""

    def dispatch(self, won: Won) -> None:
        """Hand a won run over; raise ``BackendUnavailable`` if it could not be handed over."""
        ...

    def serve(self, jobs: Sequence[Job], owner: str, events: EventBus | None = None) -> None:
        """Start running the runs of ``jobs`` handed out to this process, as ``owner``; the
        runs' events (started, succeeded…) are emitted on ``events``."""
        ...

    def stop_serving(self, timeout: float) -> None:
        """Stop taking runs; wait up to ``timeout`` seconds for running ones, give back the rest."""
        ...
