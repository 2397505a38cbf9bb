"""What ``relay doctor`` reads from NATS: the bucket's storage and replicas, and its servers.

Only the stream's info (``$JS.API.STREAM.INFO``), never a write. ``sync_interval`` is a server
setting no client can read: the doctor's rules say so instead of reading it.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.js import JetStreamContext, api

__all__ = ["kv_facts"]


async def kv_facts(nc: Client, js: JetStreamContext, stream: str) -> dict[str, object]:
    """The settings of the bucket whose stream is ``stream``, by name."""
    info = await js.stream_info(stream)
    cluster = info.cluster
    peers = [] if cluster is None else (cluster.replicas or [])
    storage = info.config.storage
    return {
        "store": "nats",
        "version": str(nc.connected_server_version),
        "storage": storage.value if isinstance(storage, api.StorageType) else storage,
        "replicas": info.config.num_replicas or 1,
        "peers_current": 1 + sum(1 for peer in peers if peer.current and not peer.offline),
        "cluster": "" if cluster is None else (cluster.name or ""),
        "servers_known": len(nc.servers),
    }
