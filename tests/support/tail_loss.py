"""Make a lease store lose its last writes on purpose: copy it at one moment, restore it later.

``lose_tail(url)`` returns a :class:`TailLoss` for the store a test URL names: its ``copy()`` keeps
the store's state at that moment, its ``restore()`` puts it back, forgetting every write made in
between, as a crash that lost the tail would (an unsynced SQLite WAL, a Redis
without persistence, a NATS server that had not fsynced, a PostgreSQL restored from a backup or
failed over to a replica behind). Close every backend on the store before restoring it.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from relay.backends._url import BackendURL

__all__ = ["TailLoss", "lose_tail"]


class TailLoss(Protocol):
    """A store's state kept at one moment, to be put back later."""

    def copy(self) -> None:
        """Keep the store's state as it is now."""

    def restore(self) -> None:
        """Put back the state :meth:`copy` kept: every later write is lost."""


def lose_tail(url: str) -> TailLoss:
    """The :class:`TailLoss` for the lease store ``url`` names (one of the test URLs)."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        return SQLiteFiles(Path(urlsplit(url).path[1:]))
    if scheme.startswith("postgres"):
        return PostgresTables(url)
    if scheme in ("redis", "redis+sentinel"):
        return RedisKeys(url)
    if scheme == "nats":
        return NatsBucket(url)
    raise ValueError(f"no way to lose the tail of {url!r}")


def _option(url: str, name: str, default: str | None = None) -> str:
    values = parse_qs(urlsplit(url).query).get(name)
    if values:
        return values[0]
    if default is None:
        raise KeyError(name)
    return default


class SQLiteFiles:
    """The database file with its ``-wal`` and ``-shm``, copied while the backend has them open."""

    def __init__(self, path: Path) -> None:
        self.files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]

    def copy(self) -> None:
        for file in self.files:
            if file.exists():
                shutil.copyfile(file, file.with_name(file.name + ".copy"))

    def restore(self) -> None:
        for file in self.files:
            kept = file.with_name(file.name + ".copy")
            if kept.exists():
                shutil.copyfile(kept, file)
            else:
                file.unlink(missing_ok=True)


class PostgresTables:
    """The schema's ``jobs`` and ``runs`` rows, copied into tables beside them."""

    def __init__(self, url: str) -> None:
        self.conninfo = BackendURL(url).without_options(["schema"])
        self.schema = _option(url, "schema")

    def _run(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement.format(s=f'"{self.schema}"'))  # type: ignore[arg-type]

    def copy(self) -> None:
        self._run(
            "CREATE TABLE {s}.kept_jobs AS SELECT * FROM {s}.jobs",
            "CREATE TABLE {s}.kept_runs AS SELECT * FROM {s}.runs",
        )

    def restore(self) -> None:
        self._run(
            "TRUNCATE {s}.jobs, {s}.runs",
            "INSERT INTO {s}.jobs SELECT * FROM {s}.kept_jobs",
            "INSERT INTO {s}.runs SELECT * FROM {s}.kept_runs",
        )


class RedisKeys:
    """Every key under the test's prefix, dumped with its time to live."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.base = BackendURL(url).without_options(["prefix", "cluster"])
        self.prefix = _option(url, "prefix")
        self.kept: dict[bytes, tuple[int, bytes]] = {}

        self.cluster = _option(url, "cluster", "no") in ("yes", "true", "1")

    def _client(self) -> Any:
        import redis
        import redis.cluster

        if self.cluster:
            return redis.cluster.RedisCluster.from_url(self.base)
        if self.url.startswith("redis+sentinel://"):  # the primary the sentinels name
            from relay.backends._redis_sentinel import sentinel_client

            return sentinel_client(BackendURL(self.url), ["prefix", "wait_replicas"])
        return redis.Redis.from_url(self.base)

    def _keys(self, client: Any) -> list[bytes]:
        nodes = {"target_nodes": "primaries"} if self.cluster else {}
        return list(client.scan_iter(match=f"{self.prefix}*", count=1000, **nodes))

    def copy(self) -> None:
        with self._client() as client:
            for key in self._keys(client):
                self.kept[key] = (max(client.pttl(key), 0), client.dump(key))

    def restore(self) -> None:
        with self._client() as client:
            for key in self._keys(client):  # one by one: a Cluster's keys lie in many slots
                client.delete(key)
            for key, (ttl, dumped) in self.kept.items():
                client.restore(key, ttl, dumped, replace=True)


class NatsBucket:
    """Every key of the test's KV bucket with its value; restored by purging and writing again."""

    def __init__(self, url: str) -> None:
        self.servers = BackendURL(url).without_options(["bucket"])
        self.bucket = _option(url, "bucket")
        self.kept: dict[str, bytes] = {}

    async def _with_bucket(self, work: Any) -> None:
        import nats

        nc = await nats.connect(self.servers, connect_timeout=5, max_reconnect_attempts=1)
        try:
            await work(await nc.jetstream().key_value(self.bucket))
        finally:
            await nc.close()

    def copy(self) -> None:
        async def read(kv: Any) -> None:
            for key in await kv.keys():
                self.kept[key] = (await kv.get(key)).value

        asyncio.run(self._with_bucket(read))

    def restore(self) -> None:
        import nats.js.errors

        async def write(kv: Any) -> None:
            try:
                now = await kv.keys()
            except nats.js.errors.NoKeysError:
                now = []
            for key in now:
                if key not in self.kept:
                    await kv.purge(key)
            for key, value in self.kept.items():
                await kv.put(key, value)

        asyncio.run(self._with_bucket(write))
