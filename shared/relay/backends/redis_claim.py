"""Redis claim backend (``redis://…?strategy=stream-id|idmp|script``): one winner per run.

Three primitives give the same guarantee and nothing more:

* ``stream-id``: ``XADD`` to the job's stream with an id made from the slot, ``<slot ms>-1``.
  A stream's ids must grow, so exactly one add per slot succeeds; the others are refused as
  "equal or smaller". An instance that claims a slot *older* than one already claimed for the job
  is refused too: that run is lost (nobody runs it), never run twice. The stream remembers its
  last id however far it is trimmed, so the claim is remembered for ever.
* ``idmp``: ``XADD … IDMP`` (Redis 8.6 or newer), with the run id as the idempotent id and one
  producer id per job. Redis keeps idempotent ids for ``retention`` seconds (at most 86 400), and
  at most 10 000 per producer, so a job may have at most that many runs within ``retention``.
* ``script`` (the fastest): one Lua script writes the run's key only if it is absent, expiring
  after ``retention`` seconds.

Keys are ``<prefix>{<job>}:claim…`` (``prefix`` defaults to ``relay:``, as for the lease
backend, whose keys never end in ``claim…``): the hash tag keeps each job's keys in one Cluster
slot. Streams are trimmed and run keys expire, so nothing grows without bound.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import partial
from importlib import resources
from typing import Any, Literal

import redis
from redis.exceptions import NoScriptError, ResponseError

from relay.backends._ms import positive_ms
from relay.backends._redis import DEFAULT_PREFIX, check_prefix, driver_url, job_base, translated
from relay.backends._redis_sentinel import OPTIONS as SENTINEL_OPTIONS
from relay.backends._redis_sentinel import close_sentinels, is_sentinel, sentinel_client
from relay.backends._url import BackendURL
from relay.deadlines import DEFAULT_TIMEOUT
from relay.errors import BackendUnavailable, ConfigurationError
from relay.runs import check_slots, run_id, slot_ms

__all__ = ["IDMP_MIN_VERSION", "STRATEGIES", "RedisClaimBackend"]

STRATEGIES = ("stream-id", "idmp", "script")
"""The ``strategy`` values this backend answers to."""
IDMP_MIN_VERSION = (8, 6)
"""The first Redis version whose ``XADD`` takes ``IDMP``."""
DEFAULT_RETENTION = 3600.0
"""Seconds a claim is remembered by the ``idmp`` and ``script`` strategies unless told."""
IDMP_MAX_RETENTION = 86_400
IDMP_MAX_PER_PRODUCER = 10_000
STREAM_KEEP = 100
"""Entries (roughly) a ``stream-id`` stream keeps: a short history of the winners, for people."""

_SCRIPTS = resources.files("relay.backends")
_CLAIM_SCRIPT = _SCRIPTS.joinpath("redis_claim.lua").read_text()
_IDMP_SETUP_SCRIPT = _SCRIPTS.joinpath("redis_claim_idmp.lua").read_text()
_OUR_OPTIONS = ("strategy", "prefix", "retention", "timeout")
_DRIVER_OPTIONS = ("socket_timeout", "socket_connect_timeout", "client_name")
_PRODUCER = "relay"


class RedisClaimBackend:
    """One winner per run on Redis, by stream id, idempotent ``XADD`` or a Lua ``SET NX``."""

    capability: Literal["claim"] = "claim"

    def __init__(
        self,
        client: redis.Redis,
        *,
        strategy: str,
        prefix: str = DEFAULT_PREFIX,
        retention: float = DEFAULT_RETENTION,
        location: str = "Redis",
    ) -> None:
        if strategy not in STRATEGIES:
            raise ConfigurationError(
                f"unknown Redis claim strategy {strategy!r}: use one of {', '.join(STRATEGIES)}"
            )
        check_prefix(prefix)
        self.strategy = strategy
        self.prefix = prefix
        self.retention = retention
        self.location = location
        self._client = client
        try:
            with self._translated():
                client.ping()
                self._claim_sha = (
                    str(client.script_load(_CLAIM_SCRIPT)) if strategy == "script" else ""
                )
                if strategy == "idmp":
                    self._check_idmp_support()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisClaimBackend:
        """Connect to the server a ``redis://…?strategy=…`` URL names.

        Options: ``prefix`` of every key (default ``relay:``), ``retention`` (seconds, for
        ``idmp`` and ``script``), ``timeout`` (seconds for each connect and reply, default
        2), and the driver's ``socket_timeout``, ``socket_connect_timeout``, ``client_name``.
        """
        parsed = BackendURL(url)
        strategy = parsed.option("strategy", "")
        known = ["strategy", "prefix", "timeout", *_DRIVER_OPTIONS]
        if strategy != "stream-id":
            known.append("retention")
        if is_sentinel(parsed):
            known += SENTINEL_OPTIONS
        parsed.check_options(known, f"the Redis claim backend (strategy={strategy})")
        retention = _retention(parsed, strategy)
        timeout = parsed.float_option("timeout", DEFAULT_TIMEOUT)
        timeouts = {"socket_connect_timeout": timeout, "socket_timeout": timeout}
        try:
            if is_sentinel(parsed):
                client = sentinel_client(parsed, _OUR_OPTIONS, **timeouts)
            else:
                client = redis.Redis.from_url(driver_url(parsed, _OUR_OPTIONS), **timeouts)
        except ValueError as exc:
            raise ConfigurationError(
                f"Redis URL {parsed.redacted()!r} is malformed: {exc}"
            ) from None
        return cls(
            client,
            strategy=strategy,
            prefix=parsed.option("prefix", DEFAULT_PREFIX),
            retention=retention,
            location=parsed.redacted(),
            **kwargs,
        )

    @property
    def name(self) -> str:
        if self.strategy == "stream-id":
            return "Redis (strategy=stream-id)"
        return f"Redis (strategy={self.strategy}, retention={self.retention:g}s)"

    @property
    def remembers_for(self) -> float | None:
        return None if self.strategy == "stream-id" else self.retention

    def claim(self, job: str, slot: datetime) -> bool:
        return self.claim_many([(job, slot)])[0]

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        if not runs:
            return []
        with self._translated():
            if self.strategy == "stream-id":
                return self._claim_stream_ids(runs)
            if self.strategy == "idmp":
                return self._claim_idmp(runs)
            return self._claim_keys(runs)

    def close(self) -> None:
        self._client.close()
        close_sentinels(self._client)

    def stream_key(self, job: str) -> str:
        """The key of ``job``'s stream (``stream-id`` and ``idmp``)."""
        return f"{self._base(job)}claims:{self.strategy}"

    def run_key(self, job: str, slot: datetime) -> str:
        """The key the ``script`` strategy writes for a run."""
        return f"{self._base(job)}claim:{slot_ms(slot)}"

    def _base(self, job: str) -> str:
        """``<prefix>{<job>}:``, the start of every key of the job (as the lease backend has it)."""
        return job_base(self.prefix, job)

    def _claim_stream_ids(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        # Oldest slots first, so a batch never refuses its own older runs.
        order = sorted(range(len(runs)), key=lambda i: runs[i][1])
        replies = self._execute([partial(self._xadd, *runs[i]) for i in order])
        won = [False] * len(runs)
        for i, reply in zip(order, replies, strict=True):
            if isinstance(reply, ResponseError) and "equal or smaller" in str(reply):
                continue
            if isinstance(reply, Exception):
                raise reply
            won[i] = True
        return won

    def _xadd(self, job: str, slot: datetime, target: Any) -> Any:
        return target.xadd(
            self.stream_key(job),
            {"run": run_id(job, slot)},
            id=f"{slot_ms(slot)}-1",
            maxlen=STREAM_KEEP,
            approximate=True,
        )

    def _claim_idmp(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        # The winner is whoever's entry the stream holds for the run id. Each call signs its
        # entries; reading the newest entry in the same transaction tells whether ours was added.
        signature = secrets.token_hex(8)
        pipe = self._client.pipeline(transaction=True)
        for job, slot in runs:
            key = self.stream_key(job)
            oldest_needed = max(slot_ms(slot) - int(self.retention * 1000), 1)
            # EVAL, not EVALSHA: a missing script inside MULTI would let the XADD create the
            # stream without its retention.
            pipe.eval(_IDMP_SETUP_SCRIPT, 1, key, int(self.retention), IDMP_MAX_PER_PRODUCER)
            pipe.execute_command(  # type: ignore[no-untyped-call]
                "XADD", key, "IDMP", _PRODUCER, run_id(job, slot),
                "MINID", "~", oldest_needed, "*", "run", run_id(job, slot), "by", signature,
            )  # fmt: skip
            pipe.xrevrange(key, count=1)
        replies = pipe.execute()
        newest = replies[2::3]
        return [
            bool(entries) and entries[0][1].get(b"by") == signature.encode() for entries in newest
        ]

    def _claim_keys(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        won: dict[int, bool] = {}
        todo = list(range(len(runs)))
        for _ in range(2):
            replies = self._execute([partial(self._evalsha, *runs[i]) for i in todo])
            for i, reply in zip(todo, replies, strict=True):
                if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
                    raise reply
                if not isinstance(reply, Exception):
                    won[i] = reply == 1
            todo = [i for i in todo if i not in won]
            if not todo:
                return [won[i] for i in range(len(runs))]
            # The server lost its scripts (a restart, SCRIPT FLUSH): load it again, once.
            self._claim_sha = str(self._client.script_load(_CLAIM_SCRIPT))
        raise BackendUnavailable(f"Redis at {self.location} keeps forgetting the claim script")

    def _evalsha(self, job: str, slot: datetime, target: Any) -> Any:
        retention_ms = positive_ms(self.retention)
        key = self.run_key(job, slot)
        return target.evalsha(self._claim_sha, 1, key, run_id(job, slot), retention_ms)

    def _execute(self, commands: list[Callable[[Any], Any]]) -> list[Any]:
        """Each command's reply, errors as values: one command directly, more in one pipeline."""
        if len(commands) == 1:
            try:
                return [commands[0](self._client)]
            except ResponseError as exc:
                return [exc]
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            command(pipe)
        return list(pipe.execute(raise_on_error=False))

    def _check_idmp_support(self) -> None:
        info = self._client.info("server")
        raw = str(info.get("redis_version", "0"))
        version = tuple(int(part) for part in raw.split(".")[:2] if part.isdigit())
        if "valkey_version" in info or version < IDMP_MIN_VERSION:
            server = (
                f"Valkey {info['valkey_version']}" if "valkey_version" in info else f"Redis {raw}"
            )
            raise ConfigurationError(
                f"strategy=idmp needs Redis 8.6 or newer (XADD … IDMP), but {self.location} runs "
                f"{server}: upgrade the server, or use strategy=script or strategy=stream-id"
            )

    def _translated(self) -> AbstractContextManager[None]:
        return translated(f"Redis at {self.location}")


def _retention(parsed: BackendURL, strategy: str) -> float:
    retention = parsed.float_option("retention", DEFAULT_RETENTION)
    if strategy == "idmp" and (retention != int(retention) or retention > IDMP_MAX_RETENTION):
        raise ConfigurationError(
            f"retention={retention:g} cannot be kept by Redis IDMP: "
            f"use a whole number of seconds from 1 to {IDMP_MAX_RETENTION}"
        )
    return retention
