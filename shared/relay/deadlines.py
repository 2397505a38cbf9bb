"""Every store call has a deadline: the ``timeout`` URL option of the network backends.

``timeout`` (seconds, default :data:`DEFAULT_TIMEOUT`) bounds each connect and each operation a
backend sends. A call that reaches it raises :class:`~relay.errors.BackendUnavailable`, which
the engine backs off on, and the connection it used is dropped, never reused half-read. Each
backend also says how long one of its calls can take in all (:attr:`Deadline.per_call`: a call
may connect again once, or wait for a pooled connection first), and a host checks that against
its lease when it is created (:func:`check_deadline`): a runner whose store calls hang must learn
that its lease ran out, and let the run go, before another instance takes it over.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from relay.errors import ConfigurationError

__all__ = ["DEFAULT_TIMEOUT", "PER_JOB", "Deadline", "URLOptions", "check_deadline", "deadline_of"]

log = logging.getLogger("relay.backends")

DEFAULT_TIMEOUT = 2.0
"""Seconds: the default ``timeout`` of a network store's connects and operations. Well under the
default heartbeat (10 s) and lease (30 s), and far above a healthy store's answer (milliseconds)."""


PER_JOB = 0.0005
"""Seconds a call that decides many jobs at once (a first tick, a start-up's registration) may
take per job beyond its deadline: 20,000 jobs' acquire is one PostgreSQL statement of about 2.4 s
on a loaded two-core machine, about 0.12 ms a job."""


@dataclass(frozen=True)
class Deadline:
    """How long a backend waits for its store."""

    timeout: float
    """The ``timeout`` URL option: the bound on each connect and each operation."""
    per_call: float
    """The longest one call of the backend can wait in all (a call deciding many jobs at once
    may take :data:`PER_JOB` more per job)."""
    given: bool
    """Whether the URL set ``timeout`` (``False``: the default)."""


class URLOptions(Protocol):
    """What :func:`deadline_of` reads of a parsed backend URL (a backend's ``BackendURL``)."""

    @property
    def options(self) -> Mapping[str, str]:
        """The URL's query options."""
        ...

    def float_option(self, name: str, default: float) -> float:
        """A query option that must be a positive, finite number, or ``default``."""
        ...


def deadline_of(parsed: URLOptions, calls: float = 1.0, extra: float = 0.0) -> Deadline:
    """The URL's ``timeout``; one call waits at most ``calls`` times it, plus ``extra`` seconds."""
    timeout = parsed.float_option("timeout", DEFAULT_TIMEOUT)
    return Deadline(timeout, timeout * calls + extra, "timeout" in parsed.options)


def check_deadline(backend: object, lease: float) -> None:
    """Refuse a store whose calls may last as long as ``lease``; warn if only its default does.

    A backend without a ``deadline`` (SQLite, whose waits are its ``busy_timeout``; a test
    double) is not checked.
    """
    deadline = getattr(backend, "deadline", None)
    if not isinstance(deadline, Deadline) or deadline.per_call < lease:
        return
    name = getattr(backend, "name", "the store")
    problem = (
        f"one call to {name} may take {deadline.per_call:g}s (URL option timeout="
        f"{deadline.timeout:g}{'' if deadline.given else ', the default'}), not less than the "
        f"lease ({lease:g}s): a runner whose store stops answering would learn too late that "
        f"its run was taken over. Set timeout={_fitting(deadline, lease):g} in the URL, or a "
        "longer lease"
    )
    if deadline.given:
        raise ConfigurationError(problem)
    log.warning("relay: %s", problem)


def _fitting(deadline: Deadline, lease: float) -> float:
    """A ``timeout`` whose calls end well within ``lease`` (a third of it)."""
    scale = deadline.per_call / deadline.timeout
    return max(round(lease / 3 / scale, 2), 0.01)
