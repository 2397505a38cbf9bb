"""What the NATS backends need to use a cluster: every server, and requests that wait out elections.

A URL may name several servers (``nats://user:pw@a:4222,b:4222``): :func:`server_urls` hands each
to nats-py as a URL of its own, with the URL's scheme (``tls://`` for TLS) and credentials, so the
client reconnects to another when the one it uses dies.

A replicated stream (a bucket with ``replicas=3``) is served by its Raft leader alone. When that
server dies, the others wait 4 to 9 s (nats-server's election timeout, not configurable) before
they elect a new leader; meanwhile a write finds no responder and a read is not answered.
:func:`retried` sends such a request again, every :data:`ATTEMPT` seconds at most, until the new
leader answers or its deadline passes, so a step waits the election out instead of failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors

from relay.backends._url import BackendURL
from relay.errors import ConfigurationError

__all__ = ["ATTEMPT", "LEADERLESS_CODES", "leaderless", "retried", "server_urls"]

T = TypeVar("T")

ATTEMPT = 1.0
"""Seconds one attempt of a request waits for its answer before it is sent again (the request
may have gone to a server that died, or to a stream that has no leader yet)."""
PAUSE = 0.1
"""Seconds between attempts that failed at once (no responder: the stream has no leader yet)."""
LEADERLESS_CODES = frozenset({10008, 10009, 10118})
"""JetStream API errors saying the cluster cannot serve the stream right now: "JetStream system
temporarily unavailable", "JetStream cluster can not handle request", "stream is offline"."""


def server_urls(url: str) -> list[str]:
    """Each server a ``nats://`` or ``tls://`` URL names, as a URL of its own for nats-py.

    ``nats://u:pw@a:4301,b:4302`` gives ``["nats://u:pw@a:4301", "nats://u:pw@b:4302"]``: every
    server gets the scheme (so TLS) and the credentials. Query options are dropped.
    """
    parsed = BackendURL(url)
    if not parsed.hosts:  # nats-py would look for a server among none, for ever
        raise ConfigurationError(
            f"NATS URL {parsed.redacted()!r} names no server: write nats://host:4222 (or "
            "nats://a:4222,b:4222 for a cluster)"
        )
    userinfo, at, _ = parsed.parts.netloc.rpartition("@")
    prefix = f"{parsed.parts.scheme}://{userinfo}{at}"
    servers = []
    for host, port in parsed.hosts:
        name = f"[{host}]" if ":" in host else host
        servers.append(prefix + name + ("" if port is None else f":{port}"))
    return servers


def leaderless(exc: BaseException) -> bool:
    """Whether ``exc`` may pass once the stream has a leader (or the client another server)."""
    if isinstance(exc, nats.js.errors.APIError):
        return exc.err_code in LEADERLESS_CODES
    return isinstance(
        exc,
        nats.errors.TimeoutError
        | nats.errors.NoRespondersError
        | nats.js.errors.NoStreamResponseError
        | nats.errors.ConnectionReconnectingError
        | nats.errors.OutboundBufferLimitError
        | nats.errors.StaleConnectionError,
    )


async def retried(
    attempt: Callable[[], Awaitable[T]],
    within: float,
    also: Callable[[Exception], bool] = lambda exc: False,
    unanswered: bool = True,
) -> T:
    """``await attempt()``, again while it fails as :func:`leaderless` says (or as ``also``
    says), for ``within`` seconds; then the last error is raised.

    Each attempt must time out by itself (after :data:`ATTEMPT` seconds). ``unanswered=False``
    never sends again a request that timed out (it may have been written), only those no server
    took.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        started = loop.time()
        try:
            return await attempt()
        except Exception as exc:
            if isinstance(exc, nats.errors.TimeoutError) and not unanswered:
                raise
            if not (leaderless(exc) or also(exc)) or loop.time() + PAUSE >= deadline:
                raise
        # An attempt that failed at once (no responder) waits a little; a timed-out one waited.
        await asyncio.sleep(max(0.0, PAUSE - (loop.time() - started)))
