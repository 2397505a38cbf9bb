"""Redis lease backend (``redis://…``, ``rediss://…``, ``valkey://…``; strategy ``lease``).

Every step is one Lua script (``redis_lease_*.lua`` next to this module), loaded once and called by
its hash. Each script reads ``TIME``, so the server's clock decides expiry; Redis 7 and Valkey
replicate a script's effects, which allows that. The keys of one job share the hash tag
``{job}``; with ``?cluster=yes`` each script decides one job, so it touches one Cluster slot.
Reading across jobs (``runs()``) goes through a set of job names and costs one script call per job.
On a single server the scripts also keep an index of live runs across jobs, ``<prefix>live``, so
``reclaimable()`` (the sweep) reads only runs another instance may lease; on Redis Cluster that
index would sit in another slot than the job's keys, so the sweep reads every job there. See
``docs/backends/redis.md``.

Tokens are ``max(last + 1, server time in µs)``: they grow strictly and stay above every token
handed out before a restart that lost the keys. Records expire ``retention`` seconds after their
last write (default 7 days), and the indexes drop them then.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from importlib import resources
from typing import Any, Literal

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    NoPermissionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.retry import Retry

from relay.backends._lost import no_lease, not_running, stale_token, started_elsewhere
from relay.backends._ms import instance_from_fields, ms
from relay.backends._redis import (
    DEFAULT_PREFIX,
    check_prefix,
    driver_url,
    job_base,
    job_name,
    split_run_key,
    time_ms,
    translated,
)
from relay.backends._redis_schedules import RedisSchedules
from relay.backends._redis_sentinel import OPTIONS as SENTINEL_OPTIONS
from relay.backends._redis_sentinel import close_sentinels, is_sentinel, sentinel_client
from relay.backends._redis_wait import DEFAULT_WAIT_TIMEOUT, WaitFor, check_replication
from relay.backends._url import BackendURL
from relay.contract import AcquireRequest, AcquireResult, JobHistory, JobInfo, Outcome
from relay.deadlines import PER_JOB, Deadline, deadline_of
from relay.errors import (
    BackendUnavailable,
    ConfigurationError,
    LeaseLost,
    NotAcknowledged,
    StoreNotFound,
)
from relay.instances import InstanceInfo, definitions_json
from relay.layout import Layout, from_json, to_json, to_record
from relay.runs import (
    MANUAL,
    Run,
    RunRecord,
    RunState,
    check_slots,
    format_slot,
    from_ms,
    parse_run_id,
    run_id,
    slot_ms,
)

__all__ = ["DEFAULT_PREFIX", "DEFAULT_RETENTION", "RedisLeaseBackend"]

DEFAULT_RETENTION = 7 * 24 * 3600.0
"""Seconds a run's record is kept after its last write."""

LAYOUT = 1
"""The key layout this Relay writes under a prefix (:mod:`relay.layout`); Relay 0.1's is 1."""
_RELAY_OPTIONS = ("strategy", "prefix", "retention", "wait_replicas", "wait_timeout", "timeout")
_DRIVER_OPTIONS = (
    "db", "socket_timeout", "socket_connect_timeout", "socket_keepalive", "health_check_interval",
    "max_connections", "client_name", "protocol", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path",
    "ssl_certfile", "ssl_keyfile", "ssl_check_hostname", "ssl_min_version",
)  # fmt: skip
_STEPS = (
    "acquire", "start", "heartbeat", "finish", "release", "skip", "read", "instance", "control",
    "live", "schedules",
)  # fmt: skip
_RETRY_CAP = 0.5
"""The longest pause before a call whose connection broke is sent again."""
_LIVE_VERSION = "1"
"""The value of ``<prefix>live:version`` once every live run of the store is in the index."""
_WAITED = frozenset({"acquire", "start", "finish", "release", "skip", "control", "schedules"})
"""The steps that change a run or a job, followed by WAIT when ``wait_replicas`` is set."""
_SWEEP_READS = 1000
"""The most index entries one sweep reads (pending runs first, then the oldest expired leases)."""


def _script_text(step: str) -> str:
    folder = resources.files("relay.backends")
    common = folder.joinpath("redis_lease_common.lua").read_text()
    return common + "\n" + folder.joinpath(f"redis_lease_{step}.lua").read_text()


_SCRIPTS = {step: _script_text(step) for step in _STEPS}


class RedisLeaseBackend(RedisSchedules):
    """Leases in Redis or Valkey, one Lua script per step, on the server's clock.

    ``client`` is a redis-py client made with ``decode_responses=True``; ``jobs_per_call`` is how
    many jobs one acquire script decides (1 on Redis Cluster). :meth:`from_url` builds both.

    ``read_only`` writes no key (loading the scripts writes none): a prefix under which no key
    exists raises :class:`~relay.errors.StoreNotFound`, and reads leave expired index entries be.
    ``empty_ok`` (with ``read_only``, for ``relay doctor``) opens such a prefix all the same: only
    :meth:`durability_facts` may then be called.

    ``wait_replicas`` (0: off) replicas must confirm each step that changes a run or a job within
    ``wait_timeout`` seconds, or it raises :class:`~relay.errors.NotAcknowledged` (see
    :mod:`relay.backends._redis_wait`).
    """

    capability: Literal["lease"] = "lease"
    LAYOUT = LAYOUT
    """The layout this Relay writes (:mod:`relay.layout`)."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        retention: float = DEFAULT_RETENTION,
        description: str = "Redis",
        jobs_per_call: int = 50,
        read_only: bool = False,
        wait_replicas: int = 0,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        deadline: Deadline | None = None,
        empty_ok: bool = False,
    ) -> None:
        if jobs_per_call < 1:
            raise ConfigurationError(f"jobs_per_call={jobs_per_call!r} must be at least 1")
        check_prefix(prefix)
        self.prefix = prefix
        self.retention_ms = ms(retention)
        self._description = description
        self.deadline = deadline
        """How long a call waits for the server (``timeout``), when opened from a URL."""
        self._redis = client
        self._slow_client: Callable[[float], redis.Redis | RedisCluster] | None = None
        """A client like ``client`` whose replies wait the seconds given longer (from a URL)."""
        self._listed: set[str] = set()
        """Jobs this process has added to the set of job names."""
        self.jobs_per_call = jobs_per_call
        """Jobs one acquire script decides; 1 keeps every script in one Cluster slot."""
        self._scripts: dict[str, Script] = {
            step: client.register_script(text) for step, text in _SCRIPTS.items()
        }
        self._read_tail: tuple[Any, ...] = (self.retention_ms, "ro" if read_only else "rw")
        """The read script's last arguments: retention, and whether it may trim indexes."""
        self._read_only = read_only
        self._live: list[str] = [] if isinstance(client, RedisCluster) else [f"{prefix}live"]
        """The key after a job's keys in every script call: the index of live runs, if kept."""
        self._wait = WaitFor(wait_replicas, wait_timeout)
        self.wait_replicas = wait_replicas
        """Replicas that must confirm each changing step (0: not waited for)."""
        self.wait_timeout = wait_timeout
        """Seconds a changing step waits for its replicas before it counts as not done."""
        try:
            with self._errors():
                self._load_scripts()
                if read_only:
                    if not empty_ok:
                        self._check_exists()
                else:
                    check_replication(self._replication(), self._wait, self.name)
                self._open_layout(read_only)
        except ConfigurationError:
            client.close()
            raise

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisLeaseBackend:
        """Connect as a URL says; options ``prefix`` (default ``relay:``), ``retention`` (s)."""
        parsed = BackendURL(url)
        sentinel = is_sentinel(parsed)
        extra = SENTINEL_OPTIONS if sentinel else ("cluster",)
        parsed.check_options([*_RELAY_OPTIONS, *_DRIVER_OPTIONS, *extra], "the Redis lease backend")
        if parsed.option("strategy", "lease") != "lease":
            raise ConfigurationError(f"{parsed.redacted()} is not a lease URL: use strategy=lease")
        cluster = _flag(parsed, "cluster")
        if cluster:
            kwargs.setdefault("jobs_per_call", 1)  # a script may touch one Cluster slot only
        where = BackendURL(parsed.redacted()).without_options(parsed.options)
        kind = "Redis Sentinel" if sentinel else "Redis Cluster" if cluster else "Redis"
        prefix = parsed.option("prefix", DEFAULT_PREFIX)
        wait = WaitFor.from_url(parsed)
        kwargs.setdefault("wait_replicas", wait.replicas)
        kwargs.setdefault("wait_timeout", wait.timeout)
        waits = wait.timeout if wait.replicas else 0.0
        deadline = cls.deadline_for(parsed)
        backend = cls(
            _connect(parsed, cluster, f"{kind} at {where}", deadline.timeout, waits),
            prefix=prefix,
            retention=parsed.float_option("retention", DEFAULT_RETENTION),
            description=f"{kind} ({where}, prefix={prefix})",
            deadline=deadline,
            **kwargs,
        )
        backend._slow_client = lambda extra: _connect(
            parsed, cluster, f"{kind} at {where}", deadline.timeout, waits + extra
        )
        return backend

    @classmethod
    def deadline_for(cls, parsed: BackendURL) -> Deadline:
        """How long one call may wait, as the URL's options set it (known before opening)."""
        # A call may find its pooled connection broken, then connect and send again (one retry),
        # and wait for its replicas behind each step (WAIT).
        wait = WaitFor.from_url(parsed)
        waits = wait.timeout if wait.replicas else 0.0
        return deadline_of(parsed, calls=2, extra=_RETRY_CAP + waits)

    @property
    def name(self) -> str:
        return self._description

    def durability_facts(self) -> dict[str, object]:
        """What ``relay doctor`` judges (:mod:`relay.doctor`): the server's role, replicas and
        persistence, and the URL's ``wait_replicas``. Only reads (``INFO``, ``CONFIG GET``)."""
        from relay.backends._redis_facts import redis_facts

        with self._errors():
            facts = redis_facts(self._redis)
            found = self._holds_keys()
        return {
            "store": "redis", **facts, "wait_replicas": self.wait_replicas, "relay_data": found,
        }  # fmt: skip

    # -- the lease contract ------------------------------------------------------------------

    def acquire(self, request: AcquireRequest) -> AcquireResult:
        job = request.job
        if job not in self._listed:
            return self.acquire_many([request])[0]
        member = _member(request)
        args = [self.retention_ms, request.owner, _request_line(request, member)]
        if self.wait_replicas:
            (reply,), confirmed = self._send("acquire", [(self._keys(job), args)])
        else:
            reply, confirmed = self._evalsha("acquire", self._keys(job), args), None
        words = reply.split(" ")
        if words[0] == "1":
            self._list_again([job])
        result = _acquire_result(request, member, words, 1)
        self._confirm("acquire", confirmed, [result])
        return result

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        # Each (owner, job)'s requests in order; a script call decides up to jobs_per_call jobs
        # of one owner, and all the calls go in one pipeline: one round trip.
        groups: dict[tuple[str, str], list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault((request.owner, request.job), []).append(index)
        members, lines = _request_lines(requests)
        by_owner: dict[str, list[tuple[str, str]]] = {}
        for group in groups:
            by_owner.setdefault(group[0], []).append(group)
        size, calls, order = self.jobs_per_call, [], []
        for owned in by_owner.values():
            for at in range(0, len(owned), size):
                chunk = owned[at : at + size]
                calls.append(self._acquire_call(lines, chunk, groups))
                order += chunk
        jobs = list(dict.fromkeys(job for _, job in order))
        listed = self._listed.intersection(jobs)
        # Per group its new_job flag, then per request: outcome, attempt, token, version.
        partly = None
        try:
            replies, confirmed = self._send_jobs("acquire", jobs, calls)
        except _PartlyDone as exc:  # a Cluster node failed: the others' wins are handed back
            partly, replies, confirmed = exc, exc.replies, 0
            for index in exc.failed:
                replies[index] = _held_reply(calls[index][1])
        words = " ".join(replies).split(" ")
        results: list[AcquireResult] = [_HELD] * len(requests)
        lost, at = [], 0
        for group in order:
            if words[at] == "1" and group[1] in listed:
                lost.append(group[1])
            at += 1
            for index in groups[group]:
                results[index] = _acquire_result(requests[index], members[index], words, at)
                at += 4
        if lost:
            self._list_again(lost)
        if partly is not None:
            won = [result.run for result in results if result.run is not None]
            raise NotAcknowledged(
                f"{self.name} failed on a node ({partly.error}): the acquire counts as not done",
                won,
            ) from partly.error
        self._confirm("acquire", confirmed, results)
        return results

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        job, member = _split(run_id)
        reply = self._call_one("start", job, [member, token, owner, ms(lease)])
        _raise_if_lost(run_id, token, reply)
        version = int(reply[2]) if len(reply) > 2 and reply[2] else None
        return Run(
            run_id, job, _slot(member), int(reply[1]), token, owner, schedule_version=version
        )

    def heartbeat(self, run_id: str, token: int, lease: float) -> None:
        job, member = _split(run_id)
        _raise_if_lost(run_id, token, self._call_one("heartbeat", job, [member, token, ms(lease)]))

    def heartbeat_many(
        self, runs: Sequence[tuple[str, int]], lease: float
    ) -> list[LeaseLost | None]:
        """:meth:`heartbeat` of each run: one script call per run, all in one pipeline (on
        Redis Cluster, one per node that serves a job's slot)."""
        calls = []
        for run, token in runs:
            job, member = _split(run)
            calls.append((self._keys(job), [member, token, ms(lease), self.retention_ms]))
        replies = self._call_many("heartbeat", calls) if calls else []
        return [_lost(run, token, reply) for (run, token), reply in zip(runs, replies, strict=True)]

    def finish(
        self, run_id: str, token: int, *, succeeded: bool, error: str | None = None
    ) -> RunState:
        job, member = _split(run_id)
        args = [member, token, int(succeeded), error or ""]
        reply = self._call_one("finish", job, args)
        _raise_if_lost(run_id, token, reply)
        return RunState(reply[1])

    def release(self, run_id: str, token: int) -> None:
        job, member = _split(run_id)
        _raise_if_lost(run_id, token, self._call_one("release", job, [member, token]))

    def skip(self, job: str, slot: datetime, reason: str) -> bool:
        return self.skip_many([(job, slot)], reason)[0]

    def skip_many(self, runs: Sequence[tuple[str, datetime]], reason: str) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        if not runs:
            return []
        calls = [
            (self._keys(job), [format_slot(slot), slot_ms(slot), reason, self.retention_ms])
            for job, slot in runs
        ]
        jobs = list(dict.fromkeys(job for job, _ in runs))
        return [bool(recorded) for recorded in self._call_jobs("skip", jobs, calls)]

    def last_slot(self, job: str) -> datetime | None:
        return self.last_slots([job])[job]

    def last_slots(self, jobs: Sequence[str]) -> dict[str, datetime | None]:
        calls = [(self._keys(job), ["last", 1, *self._read_tail]) for job in jobs]
        replies = self._call_many("read", calls) if calls else []
        return {
            job: from_ms(int(float(reply[0]))) if reply else None
            for job, reply in zip(jobs, replies, strict=True)
        }

    def job_history(self, jobs: Sequence[str], depth: int) -> dict[str, JobHistory]:
        calls = [(self._keys(job), ["history", depth, *self._read_tail]) for job in jobs]
        replies = self._call_many("read", calls) if calls else []
        return {
            job: JobHistory(
                tuple(_record(job, item) for item in recent),
                _record(job, success[0]) if success else None,
            )
            for job, (recent, success) in zip(jobs, replies, strict=True)
        }

    def mark_once(self, key: str, ttl: float) -> bool:
        with self._errors():
            return bool(self._redis.set(f"{self.prefix}once:{key}", 1, nx=True, px=ms(ttl)))

    def reclaimable(self, limit: int = 100) -> list[RunRecord]:
        records = self._read_live(limit)
        if records is None:  # no index (Redis Cluster), or not built yet: read every job
            records = self._read_all("reclaimable", limit)
            self._mark_indexed()
        return sorted(records, key=lambda r: r.scheduled_for)[:limit]

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        if job is None:
            records = self._read_all("newest", limit)
        else:
            (reply,) = self._call_many(
                "read", [(self._keys(job), ["newest", limit, *self._read_tail])]
            )
            records = [_record(job, item) for item in reply]
        records.sort(key=lambda r: (-slot_ms(r.scheduled_for), r.id))
        return records[:limit]

    def now(self) -> datetime:
        with self._errors():
            reply = self._redis.time()
        return from_ms(time_ms(reply))

    def record_instance(self, info: InstanceInfo, ttl: float) -> None:
        fields = {
            "role": info.role, "host": info.host, "pid": info.pid,
            "started_ms": slot_ms(info.started_at), "version": info.version,
            "interval": info.interval, "tasks": list(info.tasks),
        }  # fmt: skip
        if info.problem is not None:  # a key Relay 0.1 reads past
            fields["problem"] = info.problem
        if info.definitions:  # an additive field: Relay 0.1.0 reads the others only
            # As JSON text: decoding the record leaves it a string, decoded once per distinct one.
            fields["definitions"] = definitions_json(info)
        args: list[Any] = [info.owner, json.dumps(fields), ms(ttl)]
        with self._errors():
            self._scripts["instance"]([self._instances_key()], args)

    def instances(self) -> list[InstanceInfo]:
        with self._errors():
            now_ms, flat = self._scripts["instance"]([self._instances_key()], [])
        found = zip(flat[::2], flat[1::2], strict=True)
        records = [instance_from_fields(owner, json.loads(value)) for owner, value in found]
        alive = [r for r in records if r.expires_at is not None and slot_ms(r.expires_at) > now_ms]
        return sorted(alive, key=lambda r: (r.role, r.owner))

    # -- the control plane -------------------------------------------------------------------

    def register_jobs(self, specs: dict[str, str]) -> None:
        calls = [
            (self._keys(job), ["register", self.retention_ms, spec]) for job, spec in specs.items()
        ]
        self._call_jobs("control", list(specs), calls)

    def jobs(self) -> list[JobInfo]:
        with self._errors():
            names = sorted(str(job) for job in self._redis.smembers(self._jobs_key()))
        calls = [(self._keys(job), ["info", self.retention_ms]) for job in names]
        replies = self._call_many("control", calls, wait=False) if calls else []
        return [
            JobInfo(job, spec, None if at is None else from_ms(int(at)), by, why)
            for job, (spec, at, by, why) in zip(names, replies, strict=True)
        ]

    def job_page(self, after: str = "", limit: int = 50, prefix: str = "") -> list[JobInfo]:
        # The names are one set: read them all (names only), then the page's jobs alone.
        with self._errors():
            names = sorted(str(job) for job in self._redis.smembers(self._jobs_key()))
        return self._infos([n for n in names if n > after and n.startswith(prefix)][:limit])

    def job_infos(self, names: Sequence[str]) -> list[JobInfo]:
        with self._errors():  # SISMEMBER, not SMISMEMBER: Redis 6.0 has only the first
            pipe = self._redis.pipeline(transaction=False)
            for name in names:
                pipe.sismember(self._jobs_key(), name)
            members = pipe.execute() if names else []
        return self._infos(sorted(n for n, known in zip(names, members, strict=True) if known))

    def _infos(self, names: list[str]) -> list[JobInfo]:
        calls = [(self._keys(job), ["info", self.retention_ms]) for job in names]
        replies = self._call_many("control", calls, wait=False) if calls else []
        return [
            JobInfo(job, spec, None if at is None else from_ms(int(at)), by, why)
            for job, (spec, at, by, why) in zip(names, replies, strict=True)
        ]

    def pause(self, job: str, reason: str, by: str) -> bool:
        (done,) = self._control(job, ["pause", by, reason])
        return bool(done)

    def resume(self, job: str, catch_up: float | None = None) -> list[str]:
        window = "-" if catch_up is None else ms(catch_up)
        (members,) = self._control(job, ["resume", window])
        return sorted(f"{job}@{member}" for member in members)

    def trigger(self, job: str, overlap_skip: bool = False) -> RunRecord:
        slot = self.now()
        member = run_id(job, slot, manual=True).rpartition("@")[2]
        args = ["trigger", member, slot_ms(slot), int(overlap_skip)]
        (item,) = self._control(job, args)
        return _record(job, item)

    def backfill(self, job: str, slots: Sequence[datetime], serial: bool = False) -> list[bool]:
        if not slots:
            return []
        args: list[Any] = ["backfill", "buffered" if serial else "backfill"]
        for slot in slots:
            args += [format_slot(slot), slot_ms(slot)]
        (created,) = self._control(job, args)
        return [bool(flag) for flag in created]

    def prune(self, older_than: float, limit: int = 500) -> int:
        with self._errors():
            names = sorted(str(job) for job in self._redis.smembers(self._jobs_key()))
        deleted, gone = 0, []
        for at in range(0, len(names), 100):  # one round trip per hundred jobs
            chunk = names[at : at + 100]
            calls = [
                (self._keys(job), ["prune", self.retention_ms, ms(older_than), limit])
                for job in chunk
            ]
            for job, (count, empty) in zip(chunk, self._call_many("control", calls), strict=True):
                deleted += int(count)
                if int(empty):
                    gone.append(job)
            if deleted >= limit:
                break
        if gone:  # nothing of these jobs is left: the set of job names forgets them too
            with self._errors():
                self._redis.srem(self._jobs_key(), *gone)
            self._listed.difference_update(gone)
        return deleted

    def _control(self, job: str, args: list[Any]) -> list[Any]:
        """One control step on ``job`` (see redis_lease_control.lua), listing the job first."""
        op, *rest = args
        return self._call_jobs(
            "control", [job], [(self._keys(job), [op, self.retention_ms, *rest])]
        )

    def close(self) -> None:
        self._redis.close()
        close_sentinels(self._redis)

    # -- keys --------------------------------------------------------------------------------

    def _base(self, job: str) -> str:
        """The job's base key, ``<prefix>{job}:``; every key of the job starts with it.

        Made at each use (well under a microsecond): kept, it cost 100,000 jobs 13 MB.
        """
        return job_base(self.prefix, job)

    def _keys(self, job: str) -> list[str]:
        """A script call's keys for one job: its base key, then the index of live runs if kept."""
        return [self._base(job), *self._live]

    def _jobs_key(self) -> str:
        return f"{self.prefix}jobs"

    def _instances_key(self) -> str:
        return f"{self.prefix}instances"

    def layout(self) -> Layout | None:
        """The prefix's layout record (:mod:`relay.layout`); ``None`` where Relay 0.1 left none."""
        with self._errors():
            raw = self._redis.get(f"{self.prefix}layout")
        return None if raw is None else from_json(raw)

    def record_layout(self, layout: Layout) -> None:
        """Write the prefix's layout record (``relay migrate``, ``--contract``)."""
        with self._errors():
            self._redis.set(f"{self.prefix}layout", to_json(layout))

    def _open_layout(self, read_only: bool) -> None:
        """Refuse a prefix whose floor is above this Relay; a writer records its own layout."""
        found = self.layout()
        if found is not None:
            found.check(f"Redis prefix {self.prefix!r}")
        record = None if read_only else to_record(found, LAYOUT)
        if record is not None:  # set only if none is there: a newer Relay's may land first
            self._redis.set(f"{self.prefix}layout", to_json(record), nx=found is None)

    def _holds_keys(self) -> bool:
        """Whether the server holds a key under the prefix."""
        for key in (self._jobs_key(), self._instances_key()):
            if self._redis.exists(key):
                return True
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + "*"
        return next(iter(self._redis.scan_iter(match=pattern, count=1000)), None) is not None

    def _check_exists(self) -> None:
        """Refuse a prefix under which the server holds no key (a read-only open)."""
        if not self._holds_keys():
            raise StoreNotFound(
                f"{self.name} holds no key with prefix {self.prefix!r}; check ?prefix= and the "
                "database number in the URL"
            )

    def _list_again(self, jobs: list[str]) -> None:
        """Add back to the set of job names jobs this process listed but the server did not know.

        The server lost their keys (a restart without persistence), and the set with them.
        """
        with self._errors():
            self._redis.sadd(self._jobs_key(), *jobs)

    # -- building script calls ---------------------------------------------------------------

    def _acquire_call(
        self,
        lines: list[str],
        groups: list[tuple[str, str]],
        indexes: dict[tuple[str, str], list[int]],
    ) -> tuple[list[str], list[Any]]:
        """One acquire script call for ``groups`` (owner, job), all of one owner; ``lines``: each
        request's line (:func:`_request_line`)."""
        keys = [self._base(job) for _, job in groups] + self._live
        blocks = "|".join(["\n".join([lines[i] for i in indexes[group]]) for group in groups])
        return keys, [self.retention_ms, groups[0][0], blocks]

    def _read_live(self, limit: int) -> list[RunRecord] | None:
        """Reclaimable runs found through the index of live runs; None if it is not kept or built.

        Each job the index names is read by the read script, which confirms its runs and makes the
        index agree with them: O(reclaimable runs), whatever the number of jobs.
        """
        if not self._live:
            return None
        with self._errors():
            keys = self._scripts["live"](
                [*self._live, self._version_key(), self._jobs_key()],
                [_SWEEP_READS, self._read_tail[1], _LIVE_VERSION],
            )
        if keys is None:
            return None
        listed: dict[str, list[str]] = {}
        for key in keys:
            base, member = split_run_key(self.prefix, key)
            listed.setdefault(base, []).append(member)
        if not listed:
            return []
        calls = [
            ([base, *self._live], ["reclaimable", limit, *self._read_tail, *members])
            for base, members in listed.items()
        ]
        replies = self._call_many("read", calls)
        jobs = [job_name(self.prefix, base) for base in listed]
        return [_record(j, item) for j, reply in zip(jobs, replies, strict=True) for item in reply]

    def _mark_indexed(self) -> None:
        """After a read of every job: the index of live runs holds them all from now on."""
        if self._live and not self._read_only:
            with self._errors():
                self._redis.set(self._version_key(), _LIVE_VERSION)

    def _version_key(self) -> str:
        return f"{self.prefix}live:version"

    def _read_all(self, mode: str, limit: int) -> list[RunRecord]:
        with self._errors():
            jobs = sorted(str(job) for job in self._redis.smembers(self._jobs_key()))
        replies = self._call_many(
            "read", [(self._keys(job), [mode, limit, *self._read_tail]) for job in jobs]
        )
        return [_record(j, item) for j, reply in zip(jobs, replies, strict=True) for item in reply]

    # -- calling scripts ---------------------------------------------------------------------

    def _call_one(self, step: str, job: str, args: list[Any]) -> Any:
        keys, args = self._keys(job), [*args, self.retention_ms]
        if self.wait_replicas and step in _WAITED:
            return self._call_many(step, [(keys, args)])[0]
        return self._evalsha(step, keys, args)

    def _evalsha(self, step: str, keys: list[str], args: list[Any]) -> Any:
        """One script call, not waited for; the scripts are loaded again if the server forgot
        them (a restart).

        The path of every single step, so it goes around redis-py's ``Script`` wrapper and enters
        the error translation's context manager only on an error: both cost microseconds a call.
        """
        sha = self._scripts[step].sha
        try:
            try:
                return self._redis.evalsha(sha, len(keys), *keys, *args)
            except NoScriptError:
                self._load_scripts()
                return self._redis.evalsha(self._scripts[step].sha, len(keys), *keys, *args)
        except (RedisError, RedisClusterException):
            with self._errors():
                raise

    def _call_long(self, step: str, keys: list[str], args: list[Any], changes: int) -> Any:
        """One script call making ``changes`` changes at once (a batch of stored schedules): its
        reply may take :data:`~relay.deadlines.PER_JOB` longer per change, so it goes on a client
        of its own that waits that much longer (then WAIT, when ``wait_replicas`` asks)."""
        slow = self._slow_client
        client = self._redis if slow is None else slow(changes * PER_JOB)
        wait = bool(self.wait_replicas) and step in _WAITED
        try:
            with self._errors():
                if wait and isinstance(client, RedisCluster):
                    replies, confirmed = self._send_by_node(client, step, [(keys, args)], None)
                else:
                    replies, confirmed = self._pipelined(
                        client, step, [(keys, args)], None, wait=wait
                    )
        except _PartlyDone as exc:
            with self._errors():
                raise exc.error from None
        finally:
            if client is not self._redis:
                client.close()
        self._confirm(step, confirmed)
        return replies[0]

    def _call_jobs(
        self, step: str, jobs: list[str], calls: list[tuple[list[str], list[Any]]]
    ) -> list[Any]:
        """:meth:`_call_many`, first adding to the set of job names those not added yet."""
        try:
            replies, confirmed = self._send_jobs(step, jobs, calls)
        except _PartlyDone as exc:
            with self._errors():
                raise exc.error from None
        self._confirm(step, confirmed)
        return replies

    def _send_jobs(
        self, step: str, jobs: list[str], calls: list[tuple[list[str], list[Any]]]
    ) -> tuple[list[Any], int | None]:
        """:meth:`_send`, first adding to the set of job names those not added yet."""
        unlisted = [job for job in jobs if job not in self._listed]
        before = ("SADD", self._jobs_key(), *unlisted) if unlisted else None
        sent = self._send(step, calls, before)
        self._listed.update(unlisted)
        return sent

    def _call_many(
        self,
        step: str,
        calls: Sequence[tuple[list[str], list[Any]]],
        before: tuple[Any, ...] | None = None,
        *,
        wait: bool = True,
    ) -> list[Any]:
        """Call a script once per ``(keys, args)`` in one round trip (``before`` goes first);
        raise :class:`~relay.errors.NotAcknowledged` if too few replicas confirmed a change."""
        try:
            replies, confirmed = self._send(step, calls, before, wait=wait)
        except _PartlyDone as exc:
            with self._errors():
                raise exc.error from None
        self._confirm(step, confirmed)
        return replies

    def _confirm(
        self, step: str, confirmed: int | None, results: Sequence[AcquireResult] = ()
    ) -> None:
        """Raise NotAcknowledged unless ``confirmed`` (None: not waited for) is enough."""
        if confirmed is not None:
            won = [result.run for result in results if result.run is not None]
            self._wait.confirm(confirmed, self.name, step, won)

    def _send(
        self,
        step: str,
        calls: Sequence[tuple[list[str], list[Any]]],
        before: tuple[Any, ...] | None = None,
        *,
        wait: bool = True,
    ) -> tuple[list[Any], int | None]:
        """The replies of the script calls, and how many replicas confirmed them (None: the step
        is not waited for). The calls and WAIT go in one round trip on one connection."""
        wait = wait and bool(self.wait_replicas) and step in _WAITED
        if not wait and len(calls) == 1 and before is None:
            keys, args = calls[0]
            return [self._evalsha(step, keys, args)], None
        with self._errors():
            if not wait:
                return self._pipelined(self._redis, step, calls, before, wait=False)
            if isinstance(self._redis, RedisCluster):
                return self._send_by_node(self._redis, step, calls, before)
            return self._pipelined(self._redis, step, calls, before, wait=True)

    def _send_by_node(
        self,
        cluster: RedisCluster,
        step: str,
        calls: Sequence[tuple[list[str], list[Any]]],
        before: tuple[Any, ...] | None,
    ) -> tuple[list[Any], int | None]:
        """On Redis Cluster, each node's calls and a WAIT on that node: WAIT counts the replicas
        of the node it is sent to, which must be the primary of the job's slot.

        A call whose node fails is sent again if a refreshed map names another node for its
        slot (a failover: the old node never ran it, or is gone); a node that fails does not
        undo what the others did: :class:`_PartlyDone` says which calls failed.
        """
        if before is not None:
            cluster.execute_command(*before)  # type: ignore[no-untyped-call]
        replies: list[Any] = [None] * len(calls)
        errors: dict[int, Exception] = {}
        pending, fewest = list(range(len(calls))), self.wait_replicas
        for _ in range(2):
            tried: dict[int, str] = {}
            for name, node, indexes in _by_node(cluster, calls, pending):
                tried.update(dict.fromkeys(indexes, name))
                try:
                    answers, confirmed = self._pipelined(
                        node, step, [calls[i] for i in indexes], None, wait=True
                    )
                except (RedisError, RedisClusterException) as exc:
                    errors.update(dict.fromkeys(indexes, exc))
                    continue
                for index, answer in zip(indexes, answers, strict=True):
                    replies[index] = answer
                    errors.pop(index, None)
                fewest = min(fewest, confirmed or 0)
            if not errors:
                return replies, fewest
            _refresh(cluster)
            pending = [i for i in errors if _node_name(cluster, calls[i]) not in (None, tried[i])]
            if not pending:
                break
        first = errors[min(errors)]
        if len(errors) == len(calls):
            raise first
        raise _PartlyDone(replies, sorted(errors), first)

    def _pipelined(
        self,
        client: redis.Redis | RedisCluster,
        step: str,
        calls: Sequence[tuple[list[str], list[Any]]],
        before: tuple[Any, ...] | None,
        *,
        wait: bool,
    ) -> tuple[list[Any], int | None]:
        """The script calls (then WAIT, if ``wait``) in one pipeline, without a transaction."""
        script = self._scripts[step]
        pending = list(range(len(calls)))
        replies: list[Any] = [None] * len(calls)
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            if before is not None:
                pipe.execute_command(*before)
            for index in pending:
                keys, args = calls[index]
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            if wait:
                pipe.execute_command(*self._wait.command)
            answers = pipe.execute(raise_on_error=False)[0 if before is None else 1 :]
            confirmed = answers.pop() if wait else None
            for index, answer in zip(pending, answers, strict=True):
                if isinstance(answer, Exception) and not isinstance(answer, NoScriptError):
                    raise answer
                replies[index] = answer
            if isinstance(confirmed, Exception):
                raise confirmed
            # The server forgot the scripts (a restart): load them, redo only those calls.
            pending = [i for i in pending if isinstance(replies[i], NoScriptError)]
            if not pending:
                return replies, None if confirmed is None else int(confirmed)
            self._load_scripts()
            before = None
        raise BackendUnavailable(f"{self.name} keeps forgetting its Lua scripts (SCRIPT FLUSH?)")

    def _replication(self) -> list[dict[str, Any]]:
        """``INFO replication`` of the server, or of each Cluster primary ([]: ACL forbids it)."""
        try:
            if isinstance(self._redis, RedisCluster):
                found = self._redis.info("replication", target_nodes=RedisCluster.PRIMARIES)
                return [found] if "role" in found else list(found.values())
            return [self._redis.info("replication")]
        except (NoPermissionError, ResponseError):
            return []

    def _load_scripts(self) -> None:
        if isinstance(self._redis, RedisCluster):  # SCRIPT LOAD goes to every primary
            for script in self._scripts.values():
                script.sha = self._redis.script_load(script.script)
            return
        pipe = self._redis.pipeline(transaction=False)
        for script in self._scripts.values():
            pipe.script_load(script.script)
        for script, sha in zip(self._scripts.values(), pipe.execute(), strict=True):
            script.sha = sha

    def _errors(self) -> AbstractContextManager[None]:
        return translated(self.name)


def _connect(
    parsed: BackendURL, cluster: bool, where: str, timeout: float, waits: float
) -> redis.Redis | RedisCluster:
    """A client for the URL without Relay's options (a Cluster client connects at once).

    Every connect waits ``timeout`` at most, every reply ``timeout`` plus ``waits`` (the WAIT
    for replicas behind a step); a call that times out is not retried (it would wait as long
    again), one whose connection broke is, once. Through Sentinel, a demoted primary's READONLY
    counts as a broken connection: the retry asks the sentinels for the new one.
    """
    ours = (*_RELAY_OPTIONS, "cluster")
    retry = Retry(
        ExponentialBackoff(cap=_RETRY_CAP, base=0.05),
        retries=1,
        supported_errors=(redis.ConnectionError,),
    )
    options = {"decode_responses": True, "retry": retry, **_timeouts(parsed, timeout, waits)}
    if is_sentinel(parsed):
        return sentinel_client(parsed, ours, **options)
    factory = RedisCluster.from_url if cluster else redis.Redis.from_url
    try:
        return factory(driver_url(parsed, ours), **options)
    except ValueError as exc:
        raise ConfigurationError(
            f"Redis URL {parsed.redacted()} is malformed: {exc}; "
            "expected redis://[user:password@]host:port/db, such as redis://localhost:6379/0"
        ) from None
    except (RedisError, RedisClusterException) as exc:
        raise BackendUnavailable(
            f"{where} cannot be reached ({exc}): check that it runs, the host and port, and "
            "the password in the URL"
        ) from exc


class _PartlyDone(Exception):
    """Some nodes of a Cluster did their calls, others failed (``error``) the calls ``failed``."""

    def __init__(self, replies: list[Any], failed: list[int], error: Exception) -> None:
        super().__init__(str(error))
        self.replies = replies
        self.failed = failed
        self.error = error


def _by_node(
    cluster: RedisCluster, calls: Sequence[tuple[list[str], list[Any]]], indexes: list[int]
) -> list[tuple[str, redis.Redis, list[int]]]:
    """The calls ``indexes`` grouped by the node serving their first key: its name, its client."""
    groups: dict[str, list[int]] = {}
    nodes = {}
    for index in indexes:
        node = cluster.get_node_from_key(calls[index][0][0])  # type: ignore[no-untyped-call]
        nodes[node.name] = node
        groups.setdefault(node.name, []).append(index)
    return [
        (name, cluster.get_redis_connection(nodes[name]), group) for name, group in groups.items()
    ]


def _node_name(cluster: RedisCluster, call: tuple[list[str], list[Any]]) -> str | None:
    """The name of the node serving the call's first key now (None: no node serves it)."""
    try:
        return str(cluster.get_node_from_key(call[0][0]).name)  # type: ignore[no-untyped-call]
    except (RedisError, RedisClusterException):
        return None


def _refresh(cluster: RedisCluster) -> None:
    """Read again which node serves which slot, so the next call asks a promoted replica."""
    with contextlib.suppress(RedisError, RedisClusterException):  # none answers: next time
        cluster.nodes_manager.initialize()


def _held_reply(args: list[Any]) -> str:
    """The acquire script's reply for a call that was not answered: every request held."""
    words = []
    for block in args[2].split("|"):
        words += ["0"] + ["held", "0", "0", "-"] * len(block.split("\n"))
    return " ".join(words)


def _flag(parsed: BackendURL, name: str) -> bool:
    """A yes/no URL option."""
    value = parsed.option(name, "no").lower()
    if value not in ("yes", "true", "1", "no", "false", "0"):
        raise ConfigurationError(f"URL option {name}={value!r} must be yes or no")
    return value in ("yes", "true", "1")


def _timeouts(parsed: BackendURL, timeout: float, waits: float) -> dict[str, float]:
    """``timeout`` for connects and replies, unless the URL names redis-py's own options."""
    # A reply may come after the server's WAIT for replicas (``waits``), then travel.
    defaults = {"socket_connect_timeout": timeout, "socket_timeout": timeout + waits}
    return {name: value for name, value in defaults.items() if name not in parsed.options}


def _split(run_id: str) -> tuple[str, str]:
    job, _, member = run_id.rpartition("@")
    return job, member


def _slot(member: str) -> datetime:
    return parse_run_id(f"x@{member}")[1]


_NOT_WON = {
    outcome.value: AcquireResult(outcome) for outcome in Outcome if outcome is not Outcome.WON
}
_HELD = _NOT_WON[Outcome.HELD.value]


def _request_line(request: AcquireRequest, member: str) -> str:
    """One request, as a line of the acquire script's arguments."""
    stale = "-" if request.stale_after is None else ms(request.stale_after)
    overlap = 2 if request.buffer_one else int(request.overlap_skip)
    version = "-" if request.schedule_version is None else int(request.schedule_version)
    return (
        f"{member} {slot_ms(request.slot)} {ms(request.lease)} {int(request.max_attempts)} "
        f"{overlap} {stale} {version}"
    )


def _request_lines(requests: Sequence[AcquireRequest]) -> tuple[list[str], list[str]]:
    """Each request's member (:func:`_member`) and line (:func:`_request_line`), each made once
    per distinct slot and settings: a tick's requests mostly share them."""
    members, lines = [], []
    made: dict[tuple[Any, ...], tuple[str, str]] = {}
    for request in requests:
        key = (
            request.slot, request.manual, request.lease, request.max_attempts,
            request.overlap_skip, request.buffer_one, request.stale_after,
            request.schedule_version,
        )  # fmt: skip
        pair = made.get(key)
        if pair is None:
            member = _member(request)
            pair = made[key] = (member, _request_line(request, member))
        members.append(pair[0])
        lines.append(pair[1])
    return members, lines


def _member(request: AcquireRequest) -> str:
    """The run's name among its job's keys: its slot, or ``manual:<time>`` for a manual run
    (the part of ``request.id`` after ``job@``)."""
    return (MANUAL if request.manual else "") + format_slot(request.slot)


def _acquire_result(
    request: AcquireRequest, member: str, words: list[str], at: int
) -> AcquireResult:
    """The result of ``request`` from the script's words ``outcome attempt token version`` at
    ``at``."""
    outcome = words[at]
    if outcome != "won":
        return _NOT_WON[outcome]
    version = words[at + 3]
    run = Run(
        f"{request.job}@{member}", request.job, request.slot, int(words[at + 1]),
        int(words[at + 2]), request.owner,
        schedule_version=None if version == "-" else int(version),
    )  # fmt: skip
    return AcquireResult(Outcome.WON, run)


def _raise_if_lost(run_id: str, token: int, reply: list[Any]) -> None:
    lost = _lost(run_id, token, reply)
    if lost is not None:
        raise lost


def _lost(run_id: str, token: int, reply: list[Any]) -> LeaseLost | None:
    """Why a step's ``reply`` says ``token`` no longer holds the run, or None if it did."""
    if reply[0] != "lost":
        return None
    why = reply[1]
    if why == "none":
        return no_lease(run_id)
    if why == "token":
        return stale_token(run_id, token, reply[2])
    if why == "started":
        return started_elsewhere(run_id, token, reply[2])
    return not_running(run_id, reply[2])


def _record(job: str, item: list[Any]) -> RunRecord:
    member, score, *flat = item
    fields = dict(zip(flat[::2], flat[1::2], strict=True))

    def moment(name: str) -> datetime | None:
        value = fields.get(name)
        return from_ms(int(value)) if value else None

    return RunRecord(
        id=f"{job}@{member}", job=job, scheduled_for=from_ms(int(float(score))),
        state=RunState(fields["state"]), attempt=int(fields.get("attempt", 0)),
        failures=int(fields.get("failures", 0)), token=int(fields.get("token", 0)),
        owner=fields.get("owner") or None, reason=fields.get("reason") or None,
        expires_at=moment("expires_ms"), started_at=moment("started_ms"),
        finished_at=moment("finished_ms"), error=fields.get("error") or None,
        schedule_version=int(version) if (version := fields.get("schedule_version")) else None,
    )  # fmt: skip
