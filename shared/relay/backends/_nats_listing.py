"""Listing a bucket's keys: every key the bucket holds when the listing starts, or an error.

nats-py's ``KeyValue.watch()`` ends its first read with a ``None`` marker, which it also puts
first when the consumer's info says nothing is pending and the client has not yet counted a
message. But the server updates the consumer's count when it queues a message, and its answer to
the info request can reach the client before the messages do: on a loaded machine the marker then
comes first and a listing of a full bucket comes back empty, without an error.

:func:`list_keys` reads the same ordered consumer, but decides when it is done from what the
server says alone: it is empty when the consumer's info says that nothing was delivered and
nothing is pending; otherwise it reads until a message says none is pending after it. A message
that does not come within ``wait`` seconds raises ``nats.errors.TimeoutError`` (the caller sends
the listing again, then fails), never a shorter list.

:func:`stream_subjects` lists the keys from stream info instead (no consumer needed): the server
sends at most 100,000 subjects in one answer, which nats-py would take for all of them.
"""

from __future__ import annotations

import asyncio
import json

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KV_DEL, KV_MARKER_REASON, KV_OP, KV_PURGE, KeyValue

from relay.errors import BackendUnavailable

__all__ = ["list_keys", "stream_subjects"]

INACTIVE = 10.0
"""Seconds after which the server drops a listing's consumer that nobody reads any more."""


async def list_keys(
    js: JetStreamContext, stream: str, prefix: str, keys: str, *, meta_only: bool, wait: float
) -> list[KeyValue.Entry]:
    """The latest entry of each key matching ``keys`` (a subject filter below ``prefix``), deleted
    or purged keys left out; ``meta_only`` leaves values out (empty).

    Each message waits ``wait`` seconds at most (the consumer's creation and info: the timeout
    of ``js``).
    """
    delivered: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await js.subscribe(
        prefix + keys,
        stream=stream,
        cb=delivered.put,
        ordered_consumer=True,
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        headers_only=meta_only,
        inactive_threshold=INACTIVE,
    )
    latest: dict[str, KeyValue.Entry | None] = {}
    try:
        info = await sub.consumer_info()
        if not (info.delivered and info.delivered.consumer_seq) and not info.num_pending:
            return []
        while True:
            try:
                msg = await asyncio.wait_for(delivered.get(), wait)
            except asyncio.TimeoutError:
                raise nats.errors.TimeoutError from None
            meta = msg.metadata
            key = msg.subject[len(prefix) :]
            # In stream order: a later message of a key (after the ordered consumer was
            # recreated, it sends every revision since) replaces an earlier one.
            latest[key] = None if _deleted(msg) else _entry(msg, key, stream)
            if meta.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return [entry for entry in latest.values() if entry is not None]


async def stream_subjects(nc: Client, stream: str, subjects: str, wait: float) -> list[str]:
    """The subjects of ``stream`` matching the filter ``subjects`` that hold a message, from
    stream info (which the stream's leader answers), waiting ``wait`` seconds at most.

    Raises ``nats.js.errors.APIError`` (``NotFoundError``: no such stream) if the server refuses,
    and ``BackendUnavailable`` if it sends only a page of them.
    """
    request = json.dumps({"subjects_filter": subjects}).encode()
    reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=wait)
    info = json.loads(reply.data)
    if "error" in info:
        nats.js.errors.APIError.from_error(info["error"])  # raises
    found = list(info.get("state", {}).get("subjects") or {})
    if info.get("total", 0) > len(found):
        raise BackendUnavailable(
            f"NATS listed only {len(found)} of the {info['total']} subjects {subjects!r} of "
            f"stream {stream!r} (one page of stream info), so a listing would be short: are "
            "there that many jobs or instances? remove those no longer used"
        )
    return found


def _deleted(msg: Msg) -> bool:
    """Whether the message deletes or purges its key (or is a marker the server wrote)."""
    headers = msg.headers or {}
    # KV_MARKER_REASON: a marker nats-server 2.11+ writes itself (the key's TTL ran out, ...).
    return headers.get(KV_OP) in (KV_DEL, KV_PURGE) or KV_MARKER_REASON in headers


def _entry(msg: Msg, key: str, stream: str) -> KeyValue.Entry:
    meta = msg.metadata
    return KeyValue.Entry(
        bucket=stream.removeprefix("KV_"),
        key=key,
        value=msg.data,
        revision=meta.sequence.stream,
        delta=meta.num_pending,
        created=meta.timestamp,  # type: ignore[arg-type]
        operation=None,
    )
