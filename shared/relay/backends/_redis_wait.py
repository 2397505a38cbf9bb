"""Writes acknowledged by replicas: a Redis lease URL's ``wait_replicas`` and ``wait_timeout``.

With ``wait_replicas=N`` every step that changes a run or a job goes with ``WAIT N <timeout>``
behind it, on the same connection and in the same round trip. WAIT answers how many replicas have
every write of that connection so far; fewer than N within ``wait_timeout`` means a failover could
lose the step, so it raises :class:`~relay.errors.NotAcknowledged` and the engine treats the step
as not done. Heartbeats, reads and an instance's own record are not waited for: a lost heartbeat
only shortens a lease.

At open, :func:`check_replication` reads ``INFO replication`` of each primary: a primary with
replicas and no ``wait_replicas`` is named in one WARNING, and asking for more replicas than are
connected is refused. A server whose ACL forbids ``INFO`` is taken at its word: nothing is said.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay.backends._url import BackendURL
from relay.errors import ConfigurationError, NotAcknowledged
from relay.runs import Run

__all__ = ["DEFAULT_WAIT_TIMEOUT", "OPTIONS", "WaitFor", "check_replication"]

log = logging.getLogger("relay.backends.redis")

DEFAULT_WAIT_TIMEOUT = 1.0
"""Seconds a step waits for its replicas unless the URL's ``wait_timeout`` says otherwise."""
OPTIONS = ("wait_replicas", "wait_timeout")
_DEFAULT_SOCKET_TIMEOUT = 10.0
_warned: set[str] = set()
"""Servers already named in the warning about asynchronous replicas (once per process)."""


@dataclass(frozen=True)
class WaitFor:
    """How many replicas must confirm a changing step (0: none, no WAIT) and for how long."""

    replicas: int = 0
    timeout: float = DEFAULT_WAIT_TIMEOUT

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ConfigurationError(
                f"wait_replicas={self.replicas} is negative: use 0 (do not wait) or more"
            )
        if not self.timeout > 0:
            raise ConfigurationError(
                f"wait_timeout={self.timeout} must be more than 0 seconds (WAIT 0 waits for ever)"
            )

    @classmethod
    def from_url(cls, parsed: BackendURL) -> WaitFor:
        """Read ``wait_replicas`` (a whole number, default 0) and ``wait_timeout`` (seconds)."""
        raw = parsed.option("wait_replicas", "0")
        if not raw.isdigit():
            raise ConfigurationError(
                f"URL option wait_replicas={raw!r} must be a whole number of replicas, such as "
                "wait_replicas=1 (0, the default, does not wait)"
            )
        timeout = parsed.float_option("wait_timeout", DEFAULT_WAIT_TIMEOUT)
        socket = parsed.float_option("socket_timeout", _DEFAULT_SOCKET_TIMEOUT)
        if int(raw) and timeout >= socket:
            raise ConfigurationError(
                f"wait_timeout={timeout:g} is not shorter than socket_timeout={socket:g}: a step "
                "waiting for its replicas would time out as unreachable; lower wait_timeout"
            )
        return cls(int(raw), timeout)

    @property
    def command(self) -> tuple[str, int, int]:
        """The ``WAIT`` command to send after a changing step."""
        return ("WAIT", self.replicas, max(1, round(self.timeout * 1000)))

    def confirm(self, confirmed: int, where: str, step: str, won: Sequence[Run] = ()) -> None:
        """Raise :class:`NotAcknowledged` if fewer than ``replicas`` confirmed ``step``."""
        if confirmed >= self.replicas:
            return
        raise NotAcknowledged(
            f"{where}: {step} was done on the primary but only {confirmed} of the "
            f"{self.replicas} replica(s) asked for (wait_replicas) confirmed it within "
            f"{self.timeout:g}s; it counts as not done",
            won,
        )


def check_replication(infos: Iterable[Mapping[str, Any]], wait: WaitFor, where: str) -> None:
    """Warn of, or refuse, what the primaries' ``INFO replication`` says against ``wait``."""
    connected = [int(info.get("connected_slaves", 0)) for info in infos if _primary(info)]
    if not connected:
        return
    fewest = min(connected)
    if wait.replicas > fewest:
        raise ConfigurationError(
            f"{where} has {fewest} replica(s) connected to a primary, but wait_replicas="
            f"{wait.replicas}: every step would wait {wait.timeout:g}s and count as not done. "
            f"Lower wait_replicas to {fewest} or start more replicas"
        )
    if wait.replicas == 0 and max(connected) and where not in _warned:
        _warned.add(where)
        log.warning(
            "%s replicates to %d replica(s) without waiting for them: a failover can lose a "
            "run's last steps, so a run is lost or runs twice. Add wait_replicas=1 to the URL "
            "to have each step confirmed by a replica (see docs/backends/redis.md)",
            where,
            max(connected),
        )


def _primary(info: Mapping[str, Any]) -> bool:
    return info.get("role") == "master"
