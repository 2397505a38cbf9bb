"""NATS JetStream key-value lease backend: ``nats://host:4222?bucket=relay``.

Every lease step is one compare-and-swap on the job's key in a KV bucket: read the key and its
revision, apply the rules (:mod:`relay.backends._nats_kv_state`, which uses
:func:`relay.lease_rules.decide`), write the new value only if the key is still at the revision
read (``create`` when the key is new). A conflict means another instance wrote first: the step
reads again and decides again, so it may now find the run held.

The server's clock decides expiry. A step first reads the server's time from the ``ts`` field of
the bucket's stream info (sent by NATS 2.10 and newer; at most once a second, a lower bound in
between: :mod:`relay.backends._nats_clock`), then compares it with expiry times that were
themselves computed from that field. A step on a key this instance wrote last swaps on the
remembered revision without reading it first. Older servers are refused when the backend is opened.
See ``docs/backends/nats.md`` for the layout, the clock and the storage settings.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import random
import re
import ssl
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from relay.backends._ms import instance_from_fields, ms
from relay.backends._nats_clock import ServerClock
from relay.backends._nats_kv_state import JobState, RunFields, key_id, run_key
from relay.backends._nats_loop import LoopThread
from relay.backends._nats_security import (
    TLS_OPTIONS,
    PermissionWatch,
    connect_fix,
    tls_context,
)
from relay.backends._url import BackendURL
from relay.contract import AcquireRequest, AcquireResult, JobInfo
from relay.errors import (
    BackendUnavailable,
    ConfigurationError,
    LeaseLost,
    RelayError,
    StoreNotFound,
)
from relay.health import InstanceInfo
from relay.runs import (
    Run,
    RunRecord,
    RunState,
    check_slots,
    from_ms,
    is_manual,
    parse_run_id,
    slot_ms,
)

__all__ = ["INSTANCES_MAX_AGE", "MIN_SERVER_VERSION", "NatsLeaseBackend"]

log = logging.getLogger("relay.backends.nats")
T = TypeVar("T")

MIN_SERVER_VERSION = (2, 10, 0)
"""The oldest server whose stream info reports its clock (``ts``)."""
CAS_TRIES = 64
KNOWN_KEYS = 256
"""Job keys whose last value this process wrote are remembered (most recent first), so the next
step on the job swaps on that revision without reading it first; a lost swap reads it again."""
INSTANCES_MAX_AGE = 86400.0
"""Seconds the server keeps an instance's last heartbeat (its bucket's ``max_age``)."""
_OPTIONS = ["bucket", "storage", "replicas", "history", "timeout"]
_BUCKET = re.compile(r"^[A-Za-z0-9_-]+$")
_WRONG_LAST_SEQUENCE = (10071, 10164)
_STREAM_NAME_IN_USE = 10058
_KV_OPERATION = "KV-Operation"


class NatsLeaseBackend:
    """Leases in a JetStream KV bucket, one key per job; needs NATS 2.10 or newer.

    URL options: ``bucket`` (default ``relay``), ``storage`` (``file``, the default, or
    ``memory``), ``replicas`` (default 1), ``history`` (revisions kept per key, default 5) and
    ``timeout`` (seconds per request, default 5). The bucket is created if missing, unless
    ``read_only``: then a missing bucket raises :class:`~relay.errors.StoreNotFound`.

    Instances' heartbeats live in a second bucket, ``<bucket>-instances``, one key per instance,
    created by the first heartbeat. Each record is read as expired past its own ``ttl``; the
    server drops it :data:`INSTANCES_MAX_AGE` after its last write (or the first heartbeat's ttl,
    if longer), as NATS before 2.11 cannot expire one message sooner than its bucket's others.
    """

    capability: Literal["lease"] = "lease"

    def __init__(
        self,
        servers: str,
        *,
        bucket: str = "relay",
        storage: Literal["file", "memory"] = "file",
        replicas: int = 1,
        history: int = 5,
        timeout: float = 5.0,
        read_only: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._where = BackendURL(servers).redacted()
        self._tls = tls
        self._refusals = PermissionWatch(self._where, bucket)
        self.bucket = bucket
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._instances = f"{bucket}-instances"
        self._storage, self._replicas = storage, replicas
        self._timeout = timeout
        self._loop = LoopThread(f"relay-nats-{bucket}")
        self._clock = ServerClock(self._read_clock)
        self._known: OrderedDict[str, tuple[bytes, int]] = OrderedDict()
        try:
            self._nc, self._js = self._call(
                self._open(servers, storage, replicas, history, read_only), timeout * 3
            )
        except BaseException:
            self._loop.close()
            raise
        self._kv = KeyValue(bucket, self._stream, self._prefix, self._js, direct=False)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> NatsLeaseBackend:
        """Open the bucket a ``nats://`` (or ``tls://``) URL names; see the class for options."""
        parsed = BackendURL(url)
        parsed.check_options([*_OPTIONS, *TLS_OPTIONS, "strategy"], "the NATS lease backend")
        bucket = parsed.option("bucket", "relay")
        if not _BUCKET.match(bucket):
            raise ConfigurationError(
                f"bucket={bucket!r} is not a valid KV bucket name: use letters, digits, - and _"
            )
        storage = parsed.option("storage", "file")
        if storage not in ("file", "memory"):
            raise ConfigurationError(f"storage={storage!r} is not known: use 'file' or 'memory'")
        options: dict[str, Any] = {
            "bucket": bucket,
            "storage": storage,
            "replicas": _int_option(parsed, "replicas", 1, 1, 5),
            "history": _int_option(parsed, "history", 5, 1, 64),
            "timeout": parsed.float_option("timeout", 5.0),
            "tls": tls_context(parsed),
        }
        servers = parsed.without_options([*_OPTIONS, *TLS_OPTIONS, "strategy"])
        return cls(servers, **options, **kwargs)

    @property
    def name(self) -> str:
        return f"NATS KV ({self._where}, bucket {self.bucket})"

    # -- the lease contract ------------------------------------------------------------------

    def acquire(self, request: AcquireRequest) -> AcquireResult:
        return self.acquire_many([request])[0]

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        by_job: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            by_job.setdefault(request.job, []).append(index)

        async def decide_job(job: str, indexes: list[int]) -> list[AcquireResult]:
            mine = [requests[i] for i in indexes]

            def change(
                state: JobState, now_ms: int, archived: dict[int, RunFields]
            ) -> list[AcquireResult]:
                return [state.acquire(r, now_ms, archived.get(_key(r))) for r in mine]

            return await self._step(job, [_key(r) for r in mine], change)

        async def decide_all() -> list[list[AcquireResult]]:
            return list(await asyncio.gather(*(decide_job(j, ix) for j, ix in by_job.items())))

        results: list[AcquireResult | None] = [None] * len(requests)
        for indexes, decided in zip(by_job.values(), self._call(decide_all()), strict=True):
            for index, result in zip(indexes, decided, strict=True):
                results[index] = result
        return [result for result in results if result is not None]

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        job, slot = _parse(run_id)
        return self._call(
            self._step(job, [], lambda s, now, _: s.start(slot, token, owner, lease, now))
        )

    def heartbeat(self, run_id: str, token: int, lease: float) -> None:
        job, slot = _parse(run_id)
        self._call(self._step(job, [], lambda s, now, _: s.heartbeat(slot, token, lease, now)))

    def finish(
        self, run_id: str, token: int, *, succeeded: bool, error: str | None = None
    ) -> RunState:
        job, slot = _parse(run_id)
        return self._call(
            self._step(job, [], lambda s, now, _: s.finish(slot, token, succeeded, error, now))
        )

    def release(self, run_id: str, token: int) -> None:
        job, slot = _parse(run_id)
        self._call(self._step(job, [], lambda s, now, _: s.release(slot, token)))

    def skip(self, job: str, slot: datetime, reason: str) -> bool:
        key = slot_ms(slot)
        return self._call(
            self._step(job, [key], lambda s, now, old: s.skip(key, reason, now, old.get(key)))
        )

    def skip_many(self, runs: Sequence[tuple[str, datetime]], reason: str) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        return [self.skip(job, slot, reason) for job, slot in runs]

    def last_slot(self, job: str) -> datetime | None:
        return self.last_slots([job])[job]

    def last_slots(self, jobs: Sequence[str]) -> dict[str, datetime | None]:
        async def read() -> list[tuple[bytes | None, int]]:
            found = []
            for at in range(0, len(jobs), 256):  # a few hundred requests in flight at a time
                chunk = jobs[at : at + 256]
                found += await asyncio.gather(*(self._get(_job_key(job)) for job in chunk))
            return found

        found: dict[str, datetime | None] = {}
        for job, (data, _) in zip(jobs, self._call(read()), strict=True):
            last = JobState.decode(job, data).last_slot
            found[job] = None if last is None else from_ms(last)
        return found

    def reclaimable(self, limit: int = 100) -> list[RunRecord]:
        async def find() -> list[RunRecord]:
            now_ms = await self._now_ms()
            states = await self._all_jobs()
            return [record for state in states for record in state.reclaimable(now_ms)]

        records = sorted(self._call(find()), key=lambda r: (r.scheduled_for, r.id))
        return records[:limit]

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        return self._call(self._runs(job, limit))

    def now(self) -> datetime:
        return from_ms(self._call(self._now_ms()))

    def record_instance(self, info: InstanceInfo, ttl: float) -> None:
        self._call(self._record_instance(info, ttl))

    def instances(self) -> list[InstanceInfo]:
        return self._call(self._read_instances())

    # -- the control plane -------------------------------------------------------------------

    def register_jobs(self, specs: dict[str, str]) -> None:
        async def register_all() -> None:
            await asyncio.gather(
                *(self._step(job, [], lambda s, *_, spec=spec: s.register(spec))
                  for job, spec in specs.items())
            )  # fmt: skip

        self._call(register_all())

    def jobs(self) -> list[JobInfo]:
        return sorted((s.info() for s in self._call(self._all_jobs())), key=lambda i: i.name)

    def pause(self, job: str, reason: str, by: str) -> bool:
        return self._call(self._step(job, [], lambda s, now, _: s.pause(reason, by, now)))

    def resume(self, job: str, catch_up: float | None = None) -> list[str]:
        async def resume() -> list[str]:
            # Paused runs beyond the newest the job's key keeps were archived: bring those back
            # too (the key's copy then shadows the archived one).
            archived: dict[int, RunFields] = {}
            if catch_up is not None:
                for entry in await self._watch(f"run.{_encode(job)}.*", meta_only=False):
                    if entry.value:
                        archived[int(entry.key.rsplit(".", 1)[1])] = RunFields.decode(entry.value)
            return await self._step(job, [], lambda s, now, _: s.resume(catch_up, now, archived))

        return self._call(resume())

    def trigger(self, job: str, overlap_skip: bool = False) -> RunRecord:
        return self._call(self._step(job, [], lambda s, now, _: s.trigger(overlap_skip, now)))

    def backfill(self, job: str, slots: Sequence[datetime], serial: bool = False) -> list[bool]:
        keys = [slot_ms(slot) for slot in slots]
        reason = "buffered" if serial else "backfill"
        return self._call(self._step(job, keys, lambda s, _, old: s.backfill(keys, old, reason)))

    def prune(self, older_than: float, limit: int = 500) -> int:
        # Archived runs are finished and never a job's latest (its key keeps the newest): purge
        # those older than the cutoff; a purge of the subject leaves no marker behind.
        async def prune() -> int:
            cutoff = await self._now_ms() - ms(older_than)
            entries = await self._watch("run.>", meta_only=False)
            old = [
                e.key for e in entries
                if e.value and (RunFields.decode(e.value).finished_ms or cutoff) < cutoff
            ][:limit]  # fmt: skip
            for key in old:
                await self._js.purge_stream(self._stream, subject=self._prefix + key)
            deleted = len(old)
            for state in await self._all_jobs():
                if deleted >= limit:
                    break
                left = limit - deleted
                deleted += await self._step(state.job, [], lambda s, *_, n=left: s.prune(cutoff, n))
            return deleted

        return self._call(prune(), self._timeout * 12)

    def close(self) -> None:
        if not self._loop.closed:
            with contextlib.suppress(BackendUnavailable, nats.errors.Error, OSError):
                self._loop.run(self._nc.close(), self._timeout)
            self._loop.close()

    # -- one step: read, decide, compare-and-swap --------------------------------------------

    async def _step(
        self,
        job: str,
        probe: Sequence[int],
        change: Callable[[JobState, int, dict[int, RunFields]], T],
    ) -> T:
        """Apply ``change`` to the job's key as one compare-and-swap, retrying on conflicts.

        ``probe``: slots whose archived record ``change`` needs if they are not in the key.
        """
        key = _job_key(job)
        for attempt in range(CAS_TRIES):
            # The clock is read before the write, so a lease seen expired then is still expired
            # when the swap lands. The key: the value this process last wrote, if it remembers
            # one, else read at once with the clock.
            known = self._known.pop(key, None)
            data: bytes | None
            if known is not None:
                now_ms, (data, revision) = await self._clock.now_ms(), known
            else:
                clock, read = self._clock.now_ms(), self._get(key)
                now_ms, (data, revision) = await asyncio.gather(clock, read)
            state = JobState.decode(job, data)
            archived = await self._archived(state, probe)
            # A decision that writes nothing (or refuses the step) must rest on a fresh read: only
            # a won swap shows the remembered value was still current.
            try:
                result = change(state, now_ms, archived)
            except Exception:
                if known is not None:
                    continue
                raise
            if not state.changed:
                if known is not None:
                    continue
                return result
            old = state.to_archive()
            if old:  # written before the key forgets them
                await asyncio.gather(
                    *(self._js.publish(self._prefix + _run_key(job, slot), fields.encode())
                      for slot, fields in old.items())
                )  # fmt: skip
            state.drop(list(old))
            value = state.encode()
            written = await self._swap(key, value, revision)
            if written:
                self._remember(key, value, written)
                return result
            if known is None:
                await asyncio.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))
        raise BackendUnavailable(
            f"{CAS_TRIES} writes to job {job!r} in a row lost to other instances' writes"
        )

    def _remember(self, key: str, value: bytes, revision: int) -> None:
        """Keep the value this process wrote to ``key`` and its revision, for the next step."""
        self._known[key] = (value, revision)
        if len(self._known) > KNOWN_KEYS:
            self._known.popitem(last=False)

    async def _archived(self, state: JobState, probe: Sequence[int]) -> dict[int, RunFields]:
        found = {}
        for slot in probe:
            if state.may_be_archived(slot):
                data, _ = await self._get(_run_key(state.job, slot))
                if data is not None:
                    found[slot] = RunFields.decode(data)
        return found

    async def _get(self, key: str) -> tuple[bytes | None, int]:
        """The key's value (``None`` if absent or deleted) and the revision to swap on."""
        try:
            msg = await self._js.get_msg(self._stream, subject=self._prefix + key, direct=False)
        except nats.js.errors.NotFoundError:
            return None, 0
        if msg.headers and msg.headers.get(_KV_OPERATION) in ("DEL", "PURGE"):
            return None, msg.seq or 0
        return msg.data, msg.seq or 0

    async def _swap(self, key: str, value: bytes, revision: int) -> int:
        """Write ``value`` if the key is still at ``revision`` (0: absent): the new revision, or
        0 if the key had moved on."""
        headers = {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(revision)}
        try:
            ack = await self._js.publish(self._prefix + key, value, headers=headers)
        except nats.js.errors.APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                return 0
            raise
        except nats.js.errors.NoStreamResponseError:
            self._clock.forget()
            await self._read_clock()  # explains a missing bucket
            raise
        return int(ack.seq)

    async def _now_ms(self) -> int:
        """The server's clock: a lower bound, read from the server at most once a second."""
        return await self._clock.now_ms()

    async def _read_clock(self) -> int:
        """The server's clock, from the ``ts`` field of the bucket's stream info."""
        reply = await self._nc.request(
            f"$JS.API.STREAM.INFO.{self._stream}", b"", timeout=self._timeout
        )
        info = json.loads(reply.data)
        if "error" in info:
            raise BackendUnavailable(
                f"NATS at {self._where} cannot describe bucket {self.bucket!r}: "
                f"{info['error'].get('description')}; was it deleted?"
            )
        if "ts" not in info:
            raise BackendUnavailable(f"NATS at {self._where} does not report its clock: {_OLD}")
        return _parse_ts(info["ts"])

    # -- instances ---------------------------------------------------------------------------

    async def _record_instance(self, info: InstanceInfo, ttl: float) -> None:
        now_ms = await self._now_ms()
        value = {
            "role": info.role, "host": info.host, "pid": info.pid,
            "started_ms": slot_ms(info.started_at), "version": info.version,
            "interval": info.interval, "beat_ms": now_ms, "expires_ms": now_ms + ms(ttl),
        }  # fmt: skip
        subject = f"$KV.{self._instances}.{_encode(info.owner)}"
        try:
            await self._js.publish(subject, json.dumps(value).encode())
        except nats.js.errors.NoStreamResponseError:  # the first heartbeat: create the bucket
            await self._create_instances_bucket(ttl)
            await self._js.publish(subject, json.dumps(value).encode())

    async def _create_instances_bucket(self, ttl: float) -> None:
        try:
            await self._js.create_key_value(
                bucket=self._instances, history=1, ttl=max(ttl, INSTANCES_MAX_AGE),
                replicas=self._replicas,
                storage=api.StorageType(self._storage), direct=False,
                description="Relay instances' heartbeats",
            )  # fmt: skip
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:  # else: another instance was first
                raise

    async def _read_instances(self) -> list[InstanceInfo]:
        stream = f"KV_{self._instances}"
        try:
            info = await self._js.stream_info(stream, subjects_filter=">")
        except nats.js.errors.NotFoundError:
            return []  # no instance has recorded a heartbeat yet
        now_ms = await self._now_ms()
        found = []
        for subject in info.state.subjects or {}:
            try:
                msg = await self._js.get_msg(stream, subject=subject, direct=False)
            except nats.js.errors.NotFoundError:
                continue  # expired since the listing
            if msg.data and not (msg.headers and msg.headers.get(_KV_OPERATION)):
                fields = json.loads(msg.data)
                if fields["expires_ms"] > now_ms:
                    found.append(instance_from_fields(_decode(subject.rsplit(".", 1)[1]), fields))
        return sorted(found, key=lambda i: (i.role, i.owner))

    # -- listing -----------------------------------------------------------------------------

    async def _all_jobs(self) -> list[JobState]:
        entries = await self._watch("job.*", meta_only=False)
        return [JobState.decode(_job_of(e.key), e.value) for e in entries if e.value]

    async def _runs(self, job: str | None, limit: int) -> list[RunRecord]:
        if job is None:
            states = await self._all_jobs()
            archive = await self._watch("run.>", meta_only=True)
        else:
            data, _ = await self._get(_job_key(job))
            states = [JobState.decode(job, data)]
            archive = await self._watch(f"run.{_encode(job)}.*", meta_only=True)
        found: dict[tuple[str, int], RunRecord | None] = {
            (s.job, slot): f.record(s.job, slot) for s in states for slot, f in s.runs.items()
        }
        for entry in archive:  # archived runs: read only those that make the cut
            found.setdefault((_job_of(entry.key), int(entry.key.rsplit(".", 1)[1])), None)
        order = sorted(found, key=lambda js: (-abs(js[1]), key_id(*js)))[:limit]
        records = []
        for name, slot in order:
            record = found[(name, slot)]
            if record is None:
                data, _ = await self._get(_run_key(name, slot))
                if data is None:
                    continue
                record = RunFields.decode(data).record(name, slot)
            records.append(record)
        return records

    async def _watch(self, keys: str, *, meta_only: bool) -> list[KeyValue.Entry]:
        # An ephemeral consumer per listing: let the server drop it soon after we stop reading.
        watcher = await self._kv.watch(
            keys, meta_only=meta_only, ignore_deletes=True, inactive_threshold=10.0
        )
        entries = []
        try:
            while (entry := await watcher.updates(self._timeout)) is not None:  # type: ignore[no-untyped-call]
                entries.append(entry)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return entries

    # -- connecting --------------------------------------------------------------------------

    async def _open(
        self, servers: str, storage: str, replicas: int, history: int, read_only: bool
    ) -> tuple[Client, JetStreamContext]:
        nc = await self._connect(servers)
        try:
            version = nc.connected_server_version
            if (version.major, version.minor, version.patch) < MIN_SERVER_VERSION:
                raise ConfigurationError(
                    f"NATS at {self._where} is version {version}, but {_OLD}; upgrade the "
                    "server, or use nats://…?strategy=dedup (claim only) or another lease backend"
                )
            js = nc.jetstream(timeout=self._timeout)
            if read_only:
                await self._check_bucket(js)
            else:
                await self._ensure_bucket(js, storage, replicas, history)
        except BaseException:
            await nc.close()
            raise
        return nc, js

    async def _connect(self, servers: str) -> Client:
        errors: list[Exception] = []

        async def on_error(exc: Exception) -> None:
            errors.append(exc)
            self._refusals.saw(exc)
            log.debug("NATS at %s: %r", self._where, exc)

        async def on_disconnect() -> None:
            # A server back from a crash may have lost its last writes and reuse their revisions:
            # a remembered revision could then match another value. Read everything afresh.
            self._known.clear()
            self._clock.forget()

        nc = Client()
        try:
            # Reconnect for ever once connected; never buffer writes while disconnected (a
            # buffered compare-and-swap could land long after its step gave up).
            await asyncio.wait_for(
                nc.connect(
                    servers,
                    error_cb=on_error,
                    disconnected_cb=on_disconnect,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1,
                    pending_size=0,
                    connect_timeout=max(1, round(self._timeout)),
                    tls=self._tls,
                ),
                self._timeout * 2,
            )
        except (asyncio.TimeoutError, nats.errors.Error, OSError) as exc:
            await nc.close()
            last = errors[-1] if errors else exc
            raise BackendUnavailable(
                f"cannot connect to NATS at {self._where} ({last!r}); {connect_fix(last)}"
            ) from exc
        return nc

    async def _check_bucket(self, js: JetStreamContext) -> None:
        try:
            await js.stream_info(self._stream)
        except nats.js.errors.NotFoundError:
            raise StoreNotFound(
                f"KV bucket {self.bucket!r} does not exist on NATS at {self._where}; check "
                "?bucket= in the URL (read-only commands never create it)"
            ) from None

    async def _ensure_bucket(
        self, js: JetStreamContext, storage: str, replicas: int, history: int
    ) -> None:
        wanted = api.StorageType.FILE if storage == "file" else api.StorageType.MEMORY
        try:
            info = await js.stream_info(self._stream)
        except nats.js.errors.NotFoundError:
            try:
                await js.create_key_value(
                    bucket=self.bucket, history=history, storage=wanted, replicas=replicas,
                    direct=False, description="Relay leases",
                )  # fmt: skip
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != _STREAM_NAME_IN_USE:  # else: another instance was first
                    raise
            info = await js.stream_info(self._stream)
        if info.config.storage != wanted:
            raise ConfigurationError(
                f"KV bucket {self.bucket!r} on {self._where} uses {info.config.storage} storage, "
                f"but the URL asks for {storage}: use storage={info.config.storage} or another "
                "bucket"
            )

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop; translate every driver error at this boundary."""
        try:
            return self._loop.run(coro, timeout or self._timeout * 3)
        except BackendUnavailable as exc:
            raise self._refusals.explain(self._timeout * 3 + 1) or exc from exc.__cause__
        except RelayError:
            raise
        except nats.js.errors.ServiceUnavailableError as exc:
            raise BackendUnavailable(
                f"JetStream is not available on NATS at {self._where}: start the server with -js"
            ) from exc
        except (
            nats.errors.Error,
            OSError,
            asyncio.TimeoutError,
            ValueError,
            LookupError,
            TypeError,
        ) as exc:
            refused = self._refusals.explain(self._timeout * 3 + 1)
            raise refused or BackendUnavailable(
                f"NATS at {self._where} failed: {_describe(exc)}"
            ) from exc


_OLD = "the NATS lease backend needs 2.10 or newer (it reads the server's clock from stream info)"


def _describe(exc: BaseException) -> str:
    """A driver error for a message: JetStream API errors carry their code and description."""
    if isinstance(exc, nats.js.errors.APIError):
        return f"{type(exc).__name__} {exc.code}/{exc.err_code}: {exc.description}"
    return repr(exc)


def _encode(job: str) -> str:
    """A job name as a key token: base64url, since names may hold characters keys cannot."""
    return base64.urlsafe_b64encode(job.encode()).decode().rstrip("=")


def _decode(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def _job_of(key: str) -> str:
    return _decode(key.split(".")[1])


def _job_key(job: str) -> str:
    return f"job.{_encode(job)}"


def _run_key(job: str, slot: int) -> str:
    return f"run.{_encode(job)}.{slot}"


def _parse(value: str) -> tuple[str, int]:
    """The job and the key in its value of the run ``value`` names."""
    try:
        job, slot = parse_run_id(value)
    except ValueError:
        raise LeaseLost(f"{value!r} is not a run id, so it has no lease") from None
    return job, run_key(slot, manual=is_manual(value))


def _key(request: AcquireRequest) -> int:
    return run_key(request.slot, manual=request.manual)


def _parse_ts(text: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 UTC time with up to nanoseconds."""
    whole, _, rest = text.rstrip("Z").partition(".")
    stamp = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    fraction = (rest + "000")[:3] if rest else "000"
    return int(stamp.timestamp()) * 1000 + int(fraction)


def _int_option(parsed: BackendURL, name: str, default: int, low: int, high: int) -> int:
    raw = parsed.options.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ConfigurationError(
            f"URL option {name}={raw!r} must be a whole number {low} to {high}"
        )
    return int(raw)
