"""NATS claim backend (``nats://…?strategy=dedup``): one winner per run, by JetStream dedup.

Every instance publishes a message with ``Nats-Msg-Id`` set to the run id into one JetStream
stream. Within the stream's duplicate window the server stores the first message and acknowledges
every later one as a duplicate: the first publisher won, the others lost.

The window is the claim's memory (``remembers_for``): a run published again after it closes
could be won twice, so the scheduler never claims a slot older than the window (minus the spread
between instances' ticks). Messages expire with the window (``max_age``), so the stream stays small.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, Literal

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import StorageType, StreamConfig

from relay.backends._nats_cluster import retried, server_urls
from relay.backends._nats_loop import LoopThread
from relay.backends._nats_security import (
    TLS_OPTIONS,
    PermissionWatch,
    connect_fix,
    dedup_permissions,
    tls_context,
)
from relay.backends._url import BackendURL
from relay.deadlines import DEFAULT_TIMEOUT
from relay.errors import BackendUnavailable, ConfigurationError
from relay.runs import check_slots, run_id

__all__ = ["DEFAULT_STREAM", "DEFAULT_WINDOW", "NatsClaimBackend"]

DEFAULT_STREAM = "RELAY_CLAIMS"
DEFAULT_WINDOW = 300.0
"""Seconds the duplicate window (and so a claim) lasts unless told."""
_STREAM_NAME = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_OUR_OPTIONS = ("strategy", "stream", "window", "timeout", "replicas")
_STREAM_EXISTS_DIFFERENTLY = 10058
_IN_PROCESS = 10158


class NatsClaimBackend:
    """One winner per run on NATS: the first ``Nats-Msg-Id`` within the duplicate window."""

    capability: Literal["claim"] = "claim"

    def __init__(
        self,
        servers: str,
        *,
        stream: str = DEFAULT_STREAM,
        window: float = DEFAULT_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        replicas: int = 1,
        location: str = "NATS",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not _STREAM_NAME.match(stream):
            raise ConfigurationError(
                f"stream={stream!r} is not a JetStream stream name: use letters, digits, _ and -"
            )
        self.stream = stream
        self.subject = f"relay-claims.{stream}"
        self.window = window
        self.timeout = timeout
        self.replicas = replicas
        self.location = location
        self._servers = servers
        self._tls = tls
        self._connect_error: Exception | None = None
        self._refusals = PermissionWatch(location, dedup_permissions(stream))
        self._loop = LoopThread()
        self._client: Client | None = None
        self._connecting = asyncio.Lock()  # one new connection for a batch's parallel publishes
        try:
            with self._translated():
                self._loop.run(self._connected(), timeout + 5)
        except BaseException:
            self._loop.close()
            raise

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> NatsClaimBackend:
        """Connect to the server(s) a ``nats://[user:password@]host:port[,host:port…]?strategy=dedup``
        URL names (several: a cluster, any of which may answer).

        Options: ``stream`` (default ``RELAY_CLAIMS``), ``window`` in seconds (default 300),
        ``timeout`` of one request in seconds (default 2), ``replicas`` of the stream (1 to 5,
        default 1; 3 on a cluster keeps the claims through the loss of a server); TLS:
        ``tlsca``, ``tlscert``, ``tlskey`` (see :mod:`relay.backends._nats_security`).
        """
        parsed = BackendURL(url)
        parsed.check_options(
            [*_OUR_OPTIONS, *TLS_OPTIONS], "the NATS claim backend (strategy=dedup)"
        )
        return cls(
            parsed.without_options([*_OUR_OPTIONS, *TLS_OPTIONS]),
            stream=parsed.option("stream", DEFAULT_STREAM),
            window=parsed.float_option("window", DEFAULT_WINDOW),
            timeout=parsed.float_option("timeout", DEFAULT_TIMEOUT),
            replicas=_replicas(parsed),
            location=BackendURL(parsed.without_options(_OUR_OPTIONS)).redacted(),
            tls=tls_context(parsed),
            **kwargs,
        )

    @property
    def name(self) -> str:
        return f"NATS (strategy=dedup, stream={self.stream}, window={self.window:g}s)"

    @property
    def remembers_for(self) -> float | None:
        return self.window

    def claim(self, job: str, slot: datetime) -> bool:
        return self.claim_many([(job, slot)])[0]

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        if not runs:
            return []
        with self._translated():
            return self._loop.run(self._publish_all(runs), self.timeout + 5)

    def close(self) -> None:
        if self._loop.closed:
            return
        # Closing must not fail: the loop goes anyway.
        if self._client is not None:
            with suppress(Exception):
                self._loop.run(self._client.close(), self.timeout)
        self._loop.close()

    async def _connected(self) -> Client:
        """The client, connected again (with the stream checked) if the connection was lost."""
        async with self._connecting:
            if self._client is not None and not self._client.is_closed:
                return self._client
            self._client = await self._connect()
            return self._client

    async def _connect(self) -> Client:
        """A new connection to one of the servers, with the stream checked."""
        client = Client()
        try:
            await client.connect(
                servers=server_urls(self._servers),
                connect_timeout=max(1, min(int(self.timeout), 5)),
                # A lost connection is made again by the next claim (see _connected), so the
                # first failure is reported at once instead of retried in the background. nats-py
                # retries even a first connect, max_reconnect_attempts times (0: for ever).
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                error_cb=self._saw,
                tls=self._tls,
            )
            await self._ensure_stream(client)
        except BaseException:
            # A refused connect leaves the socket open in nats-py: close it ourselves.
            with suppress(Exception):
                await client.close()
            raise
        return client

    async def _ensure_stream(self, client: Client) -> None:
        config = StreamConfig(
            name=self.stream,
            subjects=[self.subject],
            duplicate_window=self.window,
            max_age=self.window,
            storage=StorageType.FILE,
            num_replicas=self.replicas,
        )
        try:
            await client.jetstream(timeout=self.timeout).add_stream(config)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_EXISTS_DIFFERENTLY:
                raise
            raise ConfigurationError(
                f"the JetStream stream {self.stream!r} exists with another configuration: every "
                "instance must use the same window and replicas (URL options window=…, "
                "replicas=…); to change them, delete the stream or choose another name (URL "
                "option stream=…)"
            ) from exc

    async def _publish_all(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        await self._connected()

        async def publish(job: str, slot: datetime) -> bool:
            rid = run_id(job, slot)

            async def attempt() -> bool:
                # Connected again if the server died since the last attempt (see _unsent).
                js = (await self._connected()).jetstream(timeout=self.timeout)
                ack = await js.publish(
                    self.subject, rid.encode(), headers={"Nats-Msg-Id": rid}, stream=self.stream
                )
                return not ack.duplicate

            # While a replicated stream elects a leader no server takes the message, and while
            # another instance's message with this id is being replicated the leader answers "in
            # process": send it again. Never one that timed out: it may have been stored, and
            # would come back a duplicate, so lost by everyone.
            return await retried(attempt, self.timeout, also=_unsent, unanswered=False)

        return list(await asyncio.gather(*(publish(job, slot) for job, slot in runs)))

    async def _saw(self, exc: Exception) -> None:
        """nats-py's error callback: keep a TLS failure, which leaves the connect hanging, and a
        permission refused, which leaves a request unanswered."""
        self._refusals.saw(exc)
        if isinstance(exc, ssl.SSLError):
            self._connect_error = exc

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except (BackendUnavailable, nats.errors.TimeoutError) as exc:
            # The loop's deadline, or a request's: say why, if the server or nats-py told us.
            refused = self._refusals.explain(self.timeout * 3 + 5)
            if refused is not None:
                raise refused from exc
            if isinstance(exc, nats.errors.TimeoutError):
                raise BackendUnavailable(
                    f"NATS at {self.location} did not answer ({exc!r}): check the server and "
                    "JetStream"
                ) from exc
            if self._connect_error is None:
                raise
            raise BackendUnavailable(
                f"cannot connect to NATS at {self.location} ({self._connect_error!r}); "
                f"{connect_fix(self._connect_error)}"
            ) from exc
        except (
            nats.errors.NoServersError,
            nats.errors.ConnectionClosedError,
            nats.errors.StaleConnectionError,
            nats.errors.UnexpectedEOF,
            OSError,
        ) as exc:
            raise BackendUnavailable(
                f"cannot reach NATS at {self.location} ({exc!r}): check that the server is "
                "running and that the URL's host and port are right"
            ) from exc
        except nats.errors.NoRespondersError as exc:
            raise BackendUnavailable(
                f"NATS at {self.location} has no JetStream, or no leader for the claims stream "
                "(most of its replicas are down): start the server with -js, or the stream's "
                "servers"
            ) from exc
        except nats.errors.Error as exc:
            if "authorization violation" in str(exc).lower():
                raise BackendUnavailable(
                    f"NATS at {self.location} refused the credentials: "
                    "check the user name and password (or token) in the URL"
                ) from exc
            raise BackendUnavailable(
                f"NATS at {self.location} did not answer ({exc!r}): check the server and JetStream"
            ) from exc


def _unsent(exc: Exception) -> bool:
    """Whether ``exc`` says no server stored this attempt's message, so it may be sent again.

    "Duplicate message id is in process": another publish of the same id is being replicated;
    the next attempt finds it stored (a duplicate) or gone. A closed connection: nats-py refuses
    to send on it (a message it sent before the close is unanswered, so timed out, instead);
    the server died, maybe the leader just after answering "in process", and the next attempt
    connects to another.
    """
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return True
    return isinstance(exc, nats.js.errors.APIError) and exc.err_code == _IN_PROCESS


def _replicas(parsed: BackendURL) -> int:
    raw = parsed.option("replicas", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= 5:
        raise ConfigurationError(f"URL option replicas={raw!r} must be a whole number 1 to 5")
    return int(raw)
