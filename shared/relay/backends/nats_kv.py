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
import contextlib
import json
import logging
import random
import re
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Sequence
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
from relay.backends._nats_cluster import (
    ATTEMPT,
    LEADERLESS_CODES,
    leaderless,
    retried,
    server_urls,
)
from relay.backends._nats_kv_state import JobState, RunFields, key_id, run_key
from relay.backends._nats_kv_state import from_key_token as _decode
from relay.backends._nats_kv_state import key_token as _encode
from relay.backends._nats_listing import list_keys, stream_subjects
from relay.backends._nats_loop import LoopThread
from relay.backends._nats_schedules import NatsSchedules
from relay.backends._nats_security import (
    TLS_OPTIONS,
    PermissionWatch,
    connect_fix,
    kv_permissions,
    tls_context,
)
from relay.backends._url import BackendURL
from relay.contract import AcquireRequest, AcquireResult, JobInfo
from relay.deadlines import DEFAULT_TIMEOUT, Deadline, deadline_of
from relay.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseLost,
    RelayError,
    StoreNotFound,
    StoreTooNew,
)
from relay.instances import InstanceInfo, definitions_json
from relay.layout import Layout, from_json, running, to_json, to_record
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
G = TypeVar("G")

MIN_SERVER_VERSION = (2, 10, 0)
"""The oldest server whose stream info reports its clock (``ts``)."""
CAS_TRIES = 64
KNOWN_KEYS = 10_000
"""Job keys whose last value this process wrote are remembered (most recent first), so the next
step on the job swaps on that revision without reading it first; a lost swap reads it again.
Was 256: a tick that leased more jobs than that renewed and finished each one with a read first
(an LRU cycled by more keys than it holds keeps none of them)."""
KNOWN_BYTES = 8 * 2**20
"""At most this many bytes of remembered values (a job's key is 0.5 to 3 KB)."""
KNOWN_DECODED = 256
"""Of the remembered keys, the most recently written keep their value decoded too, so the next
step skips decoding it (a decoded value takes about four times its JSON's size)."""
NO_CONSUMERS_FOR = 5.0
"""Seconds a listing of the jobs reads every key through the stream's leader, without trying a
consumer, after a consumer could not be made (the cluster's meta leader is being replaced)."""
INSTANCES_MAX_AGE = 86400.0
"""Seconds the server keeps an instance's last heartbeat (its bucket's ``max_age``)."""
LAYOUT = 1
"""The key layout this Relay writes in a bucket (:mod:`relay.layout`); Relay 0.1's is 1."""
_LAYOUT_KEY = "layout"
_OPTIONS = ["bucket", "storage", "replicas", "history", "timeout"]
_BUCKET = re.compile(r"^[A-Za-z0-9_-]+$")
_WRONG_LAST_SEQUENCE = (10071, 10164)
_STREAM_NAME_IN_USE = 10058
_NO_PEERS = 10005
_NOT_CLUSTERED = 10074
_KV_OPERATION = "KV-Operation"
_PER_JOB = 0.002
"""Seconds a call deciding or reading many jobs at once may take per job beyond its deadline:
every job is a request or two (10,000 jobs' acquire: about 11 s on a loaded two-core machine)."""


class NatsLeaseBackend(NatsSchedules):
    """Leases in a JetStream KV bucket, one key per job; needs NATS 2.10 or newer.

    URL options: ``bucket`` (default ``relay``), ``storage`` (``file``, the default, or
    ``memory``), ``replicas`` (default 1), ``history`` (revisions kept per key, default 5) and
    ``timeout`` (seconds per request, default 2; one step, a few requests, waits three times
    that at most). The bucket is created if missing, unless
    ``read_only``: then a missing bucket raises :class:`~relay.errors.StoreNotFound`, unless
    ``empty_ok`` (for ``relay doctor``: only :meth:`durability_facts` may then be called).

    Instances' heartbeats live in a second bucket, ``<bucket>-instances``, one key per instance,
    created by the first heartbeat. Each record is read as expired past its own ``ttl``; the
    server drops it :data:`INSTANCES_MAX_AGE` after its last write (or the first heartbeat's ttl,
    if longer), as NATS before 2.11 cannot expire one message sooner than its bucket's others.
    """

    capability: Literal["lease"] = "lease"
    LAYOUT = LAYOUT
    """The layout this Relay writes (:mod:`relay.layout`)."""

    def __init__(
        self,
        servers: str,
        *,
        bucket: str = "relay",
        storage: Literal["file", "memory"] = "file",
        replicas: int = 1,
        history: int = 5,
        timeout: float = DEFAULT_TIMEOUT,
        read_only: bool = False,
        deadline: Deadline | None = None,
        tls: ssl.SSLContext | None = None,
        empty_ok: bool = False,
    ) -> None:
        self._where = BackendURL(servers).redacted()
        self._tls = tls
        self._refusals = PermissionWatch(self._where, kv_permissions(bucket))
        self.bucket = bucket
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._instances = f"{bucket}-instances"
        self._storage, self._replicas = storage, replicas
        self._timeout = timeout
        self.deadline = deadline
        """How long a call waits for the server (``timeout``), when opened from a URL."""
        self._jobs_read = 0
        self._loop = LoopThread(f"relay-nats-{bucket}")
        self._clock = ServerClock(self._read_clock)
        self._known = _Known()
        self._no_consumers_until = 0.0
        self._found = True
        try:
            self._nc, self._js = self._call(
                self._open(servers, storage, replicas, history, read_only, empty_ok), timeout * 3
            )
        except BaseException:
            self._loop.close()
            raise
        # Steps' requests: each attempt waits ATTEMPT seconds, then goes again (see _retried).
        self._jsa = self._nc.jetstream(timeout=min(ATTEMPT, timeout))
        self._kv = KeyValue(bucket, self._stream, self._prefix, self._jsa, direct=False)
        try:
            self._call(self._open_layout(read_only))
        except BaseException:
            self.close()
            raise

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
            "timeout": parsed.float_option("timeout", DEFAULT_TIMEOUT),
            "deadline": cls.deadline_for(parsed),
            "tls": tls_context(parsed),
        }
        servers = parsed.without_options([*_OPTIONS, *TLS_OPTIONS, "strategy"])
        return cls(servers, **options, **kwargs)

    @classmethod
    def deadline_for(cls, parsed: BackendURL) -> Deadline:
        """How long one call may wait, as the URL's ``timeout`` sets it (known before opening)."""
        return deadline_of(parsed, calls=3)  # see _call

    @property
    def name(self) -> str:
        return f"NATS KV ({self._where}, bucket {self.bucket})"

    def durability_facts(self) -> dict[str, object]:
        """What ``relay doctor`` judges (:mod:`relay.doctor`): the bucket's storage, replicas and
        servers. Only reads the stream's info."""
        from relay.backends._nats_facts import kv_facts

        if not self._found:  # no bucket yet: the settings Relay would create it with
            return {
                "store": "nats", "version": str(self._nc.connected_server_version),
                "storage": self._storage, "replicas": self._replicas, "peers_current": None,
                "cluster": "", "servers_known": len(self._nc.servers), "relay_data": False,
            }  # fmt: skip
        return {**self._call(kv_facts(self._nc, self._js, self._stream)), "relay_data": True}

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

        results: list[AcquireResult | None] = [None] * len(requests)
        decisions = self._call(_each_job(by_job, decide_job), jobs=len(by_job))
        for indexes, decided in zip(by_job.values(), decisions, strict=True):
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

    def heartbeat_many(
        self, runs: Sequence[tuple[str, int]], lease: float
    ) -> list[LeaseLost | None]:
        """:meth:`heartbeat` of each run (:class:`relay.contract.BatchHeartbeat`), in one hop into
        the client's loop: one compare-and-swap per job, since a job's runs share its key, and
        the jobs' side by side. A lost run is reported for that run alone."""
        results: list[LeaseLost | None] = [None] * len(runs)
        by_job: dict[str, list[tuple[int, int, int]]] = {}
        for index, (run_id, token) in enumerate(runs):
            try:
                job, slot = _parse(run_id)
            except LeaseLost as refused:  # not a run id: that run alone, as heartbeat raises it
                results[index] = refused
                continue
            by_job.setdefault(job, []).append((index, slot, token))

        async def renew_job(job: str, mine: list[tuple[int, int, int]]) -> list[LeaseLost | None]:
            def change(state: JobState, now_ms: int, _: object) -> list[LeaseLost | None]:
                found: list[LeaseLost | None] = []
                for _, slot, token in mine:
                    try:
                        state.heartbeat(slot, token, lease, now_ms)
                    except LeaseLost as lost:
                        found.append(lost)
                    else:
                        found.append(None)
                return found

            # Every run lost writes nothing, so _step reads the key again before it says so; a
            # swap that renewed one of them shows the value the others were judged on was current.
            return await self._step(job, [], change)

        if not by_job:
            return results
        renewed = self._call(_each_job(by_job, renew_job), jobs=len(by_job))
        for mine, found in zip(by_job.values(), renewed, strict=True):
            for (index, _, _), lost in zip(mine, found, strict=True):
                results[index] = lost
        return results

    def finish(
        self, run_id: str, token: int, *, succeeded: bool, error: str | None = None
    ) -> RunState:
        job, slot = _parse(run_id)
        return self._call(
            self._step(
                job,
                [slot],
                lambda s, now, old: s.finish(slot, token, succeeded, error, now, old.get(slot)),
            )
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
        for job, (data, _) in zip(jobs, self._call(read(), jobs=len(jobs)), strict=True):
            last = JobState.decode(job, data).last_slot
            found[job] = None if last is None else from_ms(last)
        return found

    def reclaimable(self, limit: int = 100) -> list[RunRecord]:
        async def find() -> list[RunRecord]:
            now_ms = await self._now_ms()
            states = await self._all_jobs()
            self._jobs_read = len(states)  # the next sweep's allowance
            return [record for state in states for record in state.reclaimable(now_ms)]

        records = sorted(
            self._call(find(), jobs=self._jobs_read), key=lambda r: (r.scheduled_for, r.id)
        )
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

        self._call(register_all(), jobs=len(specs))

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

    # -- the bucket's layout (relay.layout) ---------------------------------------------------

    def layout(self) -> Layout | None:
        """The bucket's layout record; ``None`` where Relay 0.1 left none."""
        return self._call(self._read_layout())

    def record_layout(self, layout: Layout) -> None:
        """Write the bucket's layout record (``relay migrate``, ``--contract``)."""
        self._call(self._kv.put(_LAYOUT_KEY, to_json(layout).encode()))

    async def _read_layout(self) -> Layout | None:
        try:
            entry = await self._kv.get(_LAYOUT_KEY)
        except nats.js.errors.KeyNotFoundError:
            return None
        return None if not entry.value else from_json(entry.value)

    async def _open_layout(self, read_only: bool) -> None:
        """Refuse a bucket whose floor is above this Relay; a writer records its own layout."""
        found = await self._read_layout()
        if found is not None:
            found.check(f"NATS KV bucket {self.bucket!r}")
        record = None if read_only else to_record(found, LAYOUT)
        if record is None:
            return
        if found is None:  # create: a newer Relay's record may land first, and stays
            with contextlib.suppress(nats.js.errors.KeyWrongLastSequenceError):
                await self._kv.create(_LAYOUT_KEY, to_json(record).encode())
        else:
            await self._kv.put(_LAYOUT_KEY, to_json(record).encode())

    def _undecodable(self, exc: Exception) -> BackendError:
        """A value this Relay cannot read: a layout it can no longer use, if the bucket's record
        says so (a newer Relay's), else the store misbehaving."""
        try:
            found = self._loop.run(self._read_layout(), self._timeout * 3)
        except Exception:
            found = None
        if found is not None and not found.usable():
            return StoreTooNew(
                f"NATS KV bucket {self.bucket!r}", found.layout, found.min_relay, running()
            )
        return self._unavailable(exc)

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
            known = self._known.take(key)
            data: bytes | None
            if known is not None:
                now_ms, (data, revision, decoded) = await self._clock.now_ms(), known
                state = JobState.decode(job, data) if decoded is None else decoded
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
                await asyncio.gather(*(self._archive(job, s, f) for s, f in old.items()))
            state.drop(list(old))
            value = state.encode()
            written = await self._swap(key, value, revision)
            if written:
                state.changed = False
                self._known.keep(key, value, written, state)
                return result
            if known is None:
                await asyncio.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))
        raise BackendUnavailable(
            f"{CAS_TRIES} writes to job {job!r} in a row lost to other instances' writes"
        )

    async def _archive(self, job: str, slot: int, fields: RunFields) -> None:
        """Write a finished run to its own key (a plain write: it is written once, or again the
        same)."""
        subject = self._prefix + _run_key(job, slot)
        await self._retried(lambda: self._jsa.publish(subject, fields.encode()))

    async def _archived(self, state: JobState, probe: Sequence[int]) -> dict[int, RunFields]:
        found = {}
        for slot in probe:
            if state.may_be_archived(slot):
                data, _ = await self._get(_run_key(state.job, slot))
                if data is not None:
                    found[slot] = RunFields.decode(data)
        return found

    async def _retried(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """A step's request, sent again while the bucket's stream elects a leader (or the
        client moves to another server): see :mod:`relay.backends._nats_cluster`."""
        return await retried(attempt, self._timeout * 2)

    async def _get(self, key: str) -> tuple[bytes | None, int]:
        """The key's value (``None`` if absent or deleted) and the revision to swap on.

        Read through the stream's leader (``$JS.API.STREAM.MSG.GET``), never a "direct get" that
        any replica may answer from behind (nats-server #4162).
        """
        subject = self._prefix + key
        try:
            msg = await self._retried(
                lambda: self._jsa.get_msg(self._stream, subject=subject, direct=False)
            )
        except nats.js.errors.NotFoundError:
            return None, 0
        if msg.headers and msg.headers.get(_KV_OPERATION) in ("DEL", "PURGE"):
            return None, msg.seq or 0
        return msg.data, msg.seq or 0

    async def _swap(self, key: str, value: bytes, revision: int) -> int:
        """Write ``value`` if the key is still at ``revision`` (0: absent): the new revision, or
        0 if the key had moved on."""
        headers = {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(revision)}
        unanswered = False

        async def attempt() -> int:
            nonlocal unanswered
            try:
                ack = await self._jsa.publish(self._prefix + key, value, headers=headers)
            except nats.js.errors.APIError as exc:
                if exc.err_code not in _WRONG_LAST_SEQUENCE:
                    raise
                # An attempt whose answer was lost may have been written: then the key holds
                # these very bytes (they name this instance and its server time), and the step
                # succeeded. Another instance's value means the key moved on.
                return await self._landed(key, value) if unanswered else 0
            except nats.errors.TimeoutError:
                unanswered = True
                raise
            except nats.js.errors.NoStreamResponseError:
                self._clock.forget()
                await self._read_clock_once()  # explains a deleted bucket; else no leader yet
                raise
            return int(ack.seq)

        return await self._retried(attempt)

    async def _landed(self, key: str, value: bytes) -> int:
        """The key's revision if it holds ``value``, else 0."""
        data, revision = await self._get(key)
        return revision if data == value else 0

    async def _now_ms(self) -> int:
        """The server's clock: a lower bound, read from the server at most once a second."""
        return await self._clock.now_ms()

    async def _read_clock(self) -> int:
        """The server's clock, from the ``ts`` field of the bucket's stream info."""
        return await self._retried(self._read_clock_once)

    async def _read_clock_once(self) -> int:
        """One attempt of :meth:`_read_clock`: the stream's leader answers stream info."""
        reply = await self._nc.request(
            f"$JS.API.STREAM.INFO.{self._stream}", b"", timeout=min(ATTEMPT, self._timeout)
        )
        info = json.loads(reply.data)
        if info.get("error", {}).get("err_code") in LEADERLESS_CODES:
            raise nats.js.errors.APIError(**info["error"])
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
            "tasks": list(info.tasks),
        }  # fmt: skip
        if info.problem is not None:  # a key Relay 0.1 reads past
            value["problem"] = info.problem
        if info.definitions:  # an additive field: Relay 0.1.0 reads the others only
            # As JSON text: decoding the record leaves it a string, decoded once per distinct one.
            value["definitions"] = definitions_json(info)
        subject = f"$KV.{self._instances}.{_encode(info.owner)}"
        # One attempt, never waiting out an election: the scheduler's loop records its beat
        # between ticks, and a beat missed is only logged (the next one comes an interval later).
        try:
            await self._jsa.publish(subject, json.dumps(value).encode())
        except nats.js.errors.NoStreamResponseError:  # the first heartbeat: create the bucket
            await self._create_instances_bucket(ttl)
            await self._jsa.publish(subject, json.dumps(value).encode())

    async def _create_instances_bucket(self, ttl: float) -> None:
        try:
            await self._jsa.create_key_value(
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
            subjects = await self._retried(
                lambda: stream_subjects(self._nc, stream, ">", min(ATTEMPT, self._timeout))
            )
        except nats.js.errors.NotFoundError:
            return []  # no instance has recorded a heartbeat yet
        now_ms = await self._now_ms()
        found = []
        for subject in subjects:
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
        loop = asyncio.get_running_loop()
        if loop.time() < self._no_consumers_until:
            return await self._all_jobs_from_leader()
        try:
            entries = await self._watch_once("job.*", meta_only=False)
        except Exception as exc:
            if not leaderless(exc):
                raise
            self._no_consumers_until = loop.time() + NO_CONSUMERS_FOR
            return await self._all_jobs_from_leader()
        return [JobState.decode(_job_of(e.key), e.value) for e in entries if e.value]

    async def _all_jobs_from_leader(self) -> list[JobState]:
        """Every job's key read through the stream's leader: the keys from stream info, then a
        request per key. Slower than a consumer, but it needs none, so it does not wait for the
        cluster's meta leader (which creates consumers) while that one is being replaced."""
        subjects = await self._retried(
            lambda: stream_subjects(
                self._nc, self._stream, f"{self._prefix}job.*", min(ATTEMPT, self._timeout)
            )
        )
        keys = [subject[len(self._prefix) :] for subject in subjects]
        found: list[tuple[bytes | None, int]] = []
        for at in range(0, len(keys), 256):  # a few hundred requests in flight at a time
            found += await asyncio.gather(*(self._get(key) for key in keys[at : at + 256]))
        return [
            JobState.decode(_job_of(k), data)
            for k, (data, _) in zip(keys, found, strict=True)
            if data
        ]

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

    async def _purge(self, key: str, before: int | None = None) -> None:
        """Remove the key's messages (those below sequence ``before`` only, when given): a purge
        leaves no marker behind."""
        subject = self._prefix + key
        await self._retried(
            lambda: self._js.purge_stream(self._stream, subject=subject, seq=before)
        )

    async def _watch(self, keys: str, *, meta_only: bool) -> list[KeyValue.Entry]:
        """The keys' entries: listed again from the start if the consumer's server dies."""
        return await self._retried(lambda: self._watch_once(keys, meta_only=meta_only))

    async def _watch_once(self, keys: str, *, meta_only: bool) -> list[KeyValue.Entry]:
        """The keys' entries through an ordered consumer: all of them, or an error (each wait is
        one attempt); see :mod:`relay.backends._nats_listing`."""
        return await list_keys(
            self._jsa, self._stream, self._prefix, keys,
            meta_only=meta_only, wait=min(ATTEMPT, self._timeout),
        )  # fmt: skip

    # -- connecting --------------------------------------------------------------------------

    async def _open(
        self,
        servers: str,
        storage: str,
        replicas: int,
        history: int,
        read_only: bool,
        empty_ok: bool = False,
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
                await self._check_bucket(js, empty_ok)
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
                    server_urls(servers),
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

    async def _check_bucket(self, js: JetStreamContext, empty_ok: bool) -> None:
        try:
            await js.stream_info(self._stream)
        except nats.js.errors.NotFoundError:
            self._found = False
            if empty_ok:
                return
            raise StoreNotFound(
                f"KV bucket {self.bucket!r} does not exist on NATS at {self._where}; check "
                "?bucket= in the URL (read-only commands never create it)"
            ) from None

    async def _ensure_bucket(
        self, js: JetStreamContext, storage: str, replicas: int, history: int
    ) -> None:
        wanted = api.StorageType.FILE if storage == "file" else api.StorageType.MEMORY
        try:
            info = await self._retried(lambda: js.stream_info(self._stream))
        except nats.js.errors.NotFoundError:
            await self._retried(lambda: self._create_bucket(js, wanted, replicas, history))
            # Instances starting together: the bucket one of them created may not be found
            # until its stream has elected its first leader. Wait for it.
            info = await retried(
                lambda: js.stream_info(self._stream), self._timeout * 2,
                also=lambda exc: isinstance(exc, nats.js.errors.NotFoundError),
            )  # fmt: skip
        self._check_config(info.config, storage, replicas)

    async def _create_bucket(
        self, js: JetStreamContext, storage: api.StorageType, replicas: int, history: int
    ) -> None:
        # direct=False: the stream does not serve "direct get", so no replica answers a read
        # from behind; this backend reads through the leader anyway (see _get).
        try:
            await js.create_key_value(
                bucket=self.bucket, history=history, storage=storage, replicas=replicas,
                direct=False, description="Relay leases",
            )  # fmt: skip
        except nats.js.errors.APIError as exc:
            if exc.err_code == _NOT_CLUSTERED:
                raise ConfigurationError(
                    f"NATS at {self._where} is a single server, which keeps one replica: use "
                    f"replicas=1, or name the servers of a cluster (nats://a:4222,b:4222,c:4222)"
                ) from exc
            if exc.err_code == _NO_PEERS:
                raise BackendUnavailable(
                    f"NATS at {self._where} cannot place bucket {self.bucket!r} on {replicas} "
                    f"servers ({exc.description}): replicas={replicas} needs {replicas} servers "
                    "of the cluster up with JetStream; start them, or lower replicas"
                ) from exc
            if exc.err_code != _STREAM_NAME_IN_USE:  # else: another instance was first
                raise

    def _check_config(self, config: api.StreamConfig, storage: str, replicas: int) -> None:
        if config.storage != api.StorageType(storage):
            raise ConfigurationError(
                f"KV bucket {self.bucket!r} on {self._where} uses {config.storage} storage, "
                f"but the URL asks for {storage}: use storage={config.storage} or another bucket"
            )
        if (config.num_replicas or 1) != replicas:
            raise ConfigurationError(
                f"KV bucket {self.bucket!r} on {self._where} has {config.num_replicas or 1} "
                f"replica(s), but the URL asks for replicas={replicas}: use "
                f"replicas={config.num_replicas or 1}, another bucket, or change the bucket's "
                f"stream (nats stream edit KV_{self.bucket} --replicas {replicas})"
            )

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None, jobs: int = 0) -> T:
        """Run a coroutine on the loop; translate every driver error at this boundary.

        It waits ``timeout`` at most (default: three requests), plus ``_PER_JOB`` per job it
        decides or reads.
        """
        try:
            return self._loop.run(coro, (timeout or self._timeout * 3) + jobs * _PER_JOB)
        except BackendUnavailable as exc:
            raise self._refusals.explain(self._timeout * 3 + 1) or exc from exc.__cause__
        except RelayError:
            raise
        except (nats.errors.Error, OSError, asyncio.TimeoutError) as exc:
            raise self._unavailable(exc) from exc
        except (ValueError, LookupError, TypeError) as exc:  # a value this Relay cannot decode
            raise self._undecodable(exc) from exc

    def _unavailable(self, exc: Exception) -> BackendUnavailable:
        """The words for a driver error (a permission the server refused first: see
        :class:`PermissionWatch`)."""
        refused = self._refusals.explain(self._timeout * 3 + 1)
        if refused is not None:
            return refused
        if leaderless(exc):
            return BackendUnavailable(
                f"NATS at {self._where} did not answer in time: no server is reachable, or the "
                "bucket's stream has no leader (are most of its replicas up?); last error: "
                f"{_describe(exc)}"
            )
        if isinstance(exc, nats.js.errors.ServiceUnavailableError):
            return BackendUnavailable(
                f"JetStream is not available on NATS at {self._where}: start the server with -js"
            )
        return BackendUnavailable(f"NATS at {self._where} failed: {_describe(exc)}")


class _Known:
    """The values this process wrote last to job keys, with their revisions: at most
    :data:`KNOWN_KEYS` keys and :data:`KNOWN_BYTES` bytes, the least recently written dropped;
    the :data:`KNOWN_DECODED` most recent also decoded."""

    def __init__(self) -> None:
        self._values: OrderedDict[str, tuple[bytes, int]] = OrderedDict()
        self._decoded: OrderedDict[str, JobState] = OrderedDict()
        self._bytes = 0

    def take(self, key: str) -> tuple[bytes, int, JobState | None] | None:
        """The key's remembered value, revision and decoded value (if kept), forgotten: the
        caller may change the decoded value, and a won swap keeps the new one."""
        known = self._values.pop(key, None)
        if known is None:
            return None
        self._bytes -= len(known[0])
        return known[0], known[1], self._decoded.pop(key, None)

    def keep(self, key: str, value: bytes, revision: int, decoded: JobState) -> None:
        """Remember what this process just wrote to ``key`` (``decoded``: ``value`` decoded)."""
        self.take(key)
        self._values[key] = (value, revision)
        self._decoded[key] = decoded
        self._bytes += len(value)
        while len(self._values) > KNOWN_KEYS or self._bytes > KNOWN_BYTES:
            old, (dropped, _) = self._values.popitem(last=False)
            self._bytes -= len(dropped)
            self._decoded.pop(old, None)
        while len(self._decoded) > KNOWN_DECODED:
            self._decoded.popitem(last=False)

    def clear(self) -> None:
        """Forget every key."""
        self._values.clear()
        self._decoded.clear()
        self._bytes = 0


_OLD = "the NATS lease backend needs 2.10 or newer (it reads the server's clock from stream info)"


async def _each_job(
    groups: dict[str, G], step: Callable[[str, G], Awaitable[list[T]]]
) -> list[list[T]]:
    """``step`` of each job's group, side by side, in the groups' order; a single job (every
    single step) awaits it directly, with no task to create and gather."""
    if len(groups) == 1:
        return [await step(*next(iter(groups.items())))]
    return list(await asyncio.gather(*(step(job, group) for job, group in groups.items())))


def _describe(exc: BaseException) -> str:
    """A driver error for a message: JetStream API errors carry their code and description."""
    if isinstance(exc, nats.js.errors.APIError):
        return f"{type(exc).__name__} {exc.code}/{exc.err_code}: {exc.description}"
    return repr(exc)


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
