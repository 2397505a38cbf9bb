"""What ``relay doctor`` reads from Redis: role, replicas, persistence, ``min-replicas-to-write``.

Only ``INFO`` and ``CONFIG GET``, never a write. A managed service or an ACL may refuse
``CONFIG GET`` (or rename it): that setting is then ``None`` ("unknown"), not an error. On Redis
Cluster each primary is read; a number is the smallest any primary has, a setting on which the
primaries differ is ``None``.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

__all__ = ["redis_facts"]

_CONFIG = ("appendonly", "appendfsync", "save", "min-replicas-to-write", "min-replicas-max-lag")


def redis_facts(client: redis.Redis | RedisCluster) -> dict[str, object]:
    """The settings of the server(s) ``client`` writes to, by name."""
    if isinstance(client, RedisCluster):
        nodes = [node.redis_connection for node in client.get_primaries()]  # type: ignore[no-untyped-call]
        found = [_one(node) for node in nodes if node is not None]
        return {**_merged(found), "cluster_primaries": len(found)}
    return _one(client)


def _one(client: redis.Redis) -> dict[str, object]:
    server = _info(client, "server")
    replication = _info(client, "replication")
    persistence = _info(client, "persistence")
    config = {name: _config(client, name) for name in _CONFIG}
    appendonly = config["appendonly"]
    if appendonly is None and "aof_enabled" in persistence:
        appendonly = "yes" if persistence["aof_enabled"] else "no"
    role = replication.get("role")
    return {
        "version": server.get("valkey_version") or server.get("redis_version"),
        "role": {"master": "primary", "slave": "replica"}.get(str(role), role),
        "connected_replicas": replication.get("connected_slaves"),
        "appendonly": appendonly,
        "appendfsync": config["appendfsync"],
        "save": config["save"],
        "min_replicas_to_write": _number(config["min-replicas-to-write"]),
        "min_replicas_max_lag": _number(config["min-replicas-max-lag"]),
    }


def _info(client: redis.Redis, section: str) -> dict[str, Any]:
    try:
        return dict(client.info(section))
    except ResponseError:  # refused by an ACL: every setting it holds is unknown
        return {}


def _config(client: redis.Redis, name: str) -> str | None:
    try:
        reply = client.config_get(name)
    except ResponseError:  # refused by an ACL, or CONFIG renamed by a managed service
        return None
    value = reply.get(name)
    return None if value is None else str(value)


def _number(value: str | None) -> int | None:
    return None if value is None or not value.isdigit() else int(value)


def _merged(found: list[dict[str, object]]) -> dict[str, object]:
    merged: dict[str, object] = {}
    for name in found[0] if found else ():
        values = [facts[name] for facts in found]
        if all(isinstance(v, int) for v in values):
            merged[name] = min(v for v in values if isinstance(v, int))
        else:
            merged[name] = values[0] if len(set(map(str, values))) == 1 else None
    return merged
