"""The value of one job's key in the NATS lease bucket, and the lease steps applied to it.

A job's key holds its fencing-token counter, its latest slot, its registered definition, whether it
is paused, and every run that is not archived yet (all live and pending runs, and the newest
finished ones). Each lease step reads that value, changes it here (pure functions, no I/O) and
writes it back with a compare-and-swap on the revision it read, so the check and the write are one
step. Finished runs beyond the newest :data:`KEEP_FINISHED` move to a key of their own (see
:mod:`relay.backends.nats_kv`).

Runs are keyed by their slot in milliseconds; a manual run, whose "slot" is when it was triggered,
by minus that (:func:`run_key`), so the two can never collide.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

from relay.backends._lost import finished_again, is_held, lease_lost, started_elsewhere
from relay.backends._ms import ms as _ms
from relay.backends._ms import optional_from_ms as _time
from relay.contract import AcquireRequest, AcquireResult, JobInfo, Outcome
from relay.lease_rules import BUFFERED, Action, StoredRun, decide
from relay.runs import Run, RunRecord, RunState, from_ms, run_id, slot_ms

__all__ = [
    "KEEP_FINISHED", "JobState", "RunFields", "from_key_token", "key_id", "key_token", "run_key",
]  # fmt: skip


def key_token(name: str) -> str:
    """A job's (or an owner's) name as a key token: base64url, since names may hold characters
    keys cannot."""
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def from_key_token(token: str) -> str:
    """The name :func:`key_token` encoded."""
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def run_key(slot: datetime, *, manual: bool = False) -> int:
    """The key of a run in a job's value: its slot in ms, negated for a manual run."""
    return -slot_ms(slot) if manual else slot_ms(slot)


def key_id(job: str, key: int) -> str:
    """The run id of the run at ``key``."""
    return run_id(job, from_ms(abs(key)), manual=key < 0)


KEEP_FINISHED = 8
"""Finished runs a job's key keeps before older ones are archived to keys of their own. Every
lease step decodes and re-encodes the whole key, so it stays small (was 32: a third of a step's
time went to JSON; see docs/performance.md)."""
_FINAL = frozenset(state.value for state in RunState if state.final)
FORMAT = 1
_JSON = json.JSONEncoder(separators=(",", ":"))
"""What ``json.dumps(value, separators=(",", ":"))`` uses, made once rather than per call."""


@dataclass
class RunFields:
    """One run as stored: the columns of the SQLite backend's table, times in server ms."""

    state: str
    attempt: int = 0
    failures: int = 0
    max_attempts: int = 1
    token: int = 0
    owner: str | None = None
    reason: str | None = None
    error: str | None = None
    expires_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    schedule_version: int | None = None
    """The stored schedule's version of the run's first lease; kept out of the JSON when None,
    so records of code jobs stay as they were."""

    @property
    def run_state(self) -> RunState:
        """The state as an enum."""
        return RunState(self.state)

    def values(self) -> dict[str, Any]:
        """The fields as stored in JSON."""
        value = vars(self)
        if self.schedule_version is None and "schedule_version" in value:
            value = value.copy()
            del value["schedule_version"]
        return value

    def encode(self) -> bytes:
        """JSON for a run's own (archive) key."""
        return _JSON.encode(self.values()).encode()

    @classmethod
    def decode(cls, data: bytes) -> RunFields:
        """Read what :meth:`encode` wrote."""
        return cls.from_values(json.loads(data))

    @classmethod
    def from_values(cls, value: dict[str, Any]) -> RunFields:
        """The run whose stored fields :meth:`values` gave: ``value`` (parsed JSON, owned by the
        caller no longer) becomes the instance's own attributes, without a copy; a field left out
        (``schedule_version``) reads as its default, as through the constructor. A field a newer
        Relay added is kept as it is, and written back with the run (rolling upgrades)."""
        if "state" not in value:
            return cls(**value)  # refuses it, naming the field
        if not value.keys() <= _RUN_FIELDS:  # never let a stored name hide a method
            for name in [k for k in value if k not in _RUN_FIELDS and hasattr(cls, k)]:
                del value[name]
        run = object.__new__(cls)
        run.__dict__ = value
        return run

    def record(self, job: str, slot: int) -> RunRecord:
        """The run as the contract reports it."""
        return RunRecord(
            id=key_id(job, slot), job=job, scheduled_for=from_ms(abs(slot)),
            state=self.run_state, attempt=self.attempt, failures=self.failures, token=self.token,
            owner=self.owner, reason=self.reason, expires_at=_time(self.expires_ms),
            started_at=_time(self.started_ms), finished_at=_time(self.finished_ms),
            error=self.error, schedule_version=self.schedule_version,
        )  # fmt: skip


_RUN_FIELDS = frozenset(f.name for f in dataclass_fields(RunFields))
_JOB_FIELDS = frozenset(("format", "job", "token", "last_slot", "runs", "spec", "paused"))


@dataclass
class JobState:
    """The value of a job's key. ``changed`` says whether a step must write it back."""

    job: str
    token: int = 0
    last_slot: int | None = None
    runs: dict[int, RunFields] = field(default_factory=dict)
    changed: bool = False
    spec: str | None = None
    paused: dict[str, Any] | None = None
    """While the job is paused: ``at`` (server ms), ``by`` and ``reason``."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields a newer Relay wrote in the key: kept, and written back as they were."""
    _encoded: dict[int, tuple[dict[str, Any], str]] = field(
        default_factory=dict, repr=False, compare=False
    )
    """Each run's JSON as :meth:`encode` last wrote it, with a copy of the attributes it was made
    from: a state kept between steps (``relay.backends.nats_kv``) re-encodes only the runs that
    changed."""

    @classmethod
    def decode(cls, job: str, data: bytes | None) -> JobState:
        """The state stored in ``data`` (``None``: the job has no key yet)."""
        if not data:
            return cls(job)
        value: dict[str, Any] = json.loads(data)
        if value.get("format") != FORMAT:
            raise ValueError(f"unknown format {value.get('format')!r} for job {job!r}")
        runs = {int(slot): RunFields.from_values(run) for slot, run in value["runs"].items()}
        extra = {k: v for k, v in value.items() if k not in _JOB_FIELDS}
        return cls(
            job, value["token"], value["last_slot"], runs,
            spec=value.get("spec"), paused=value.get("paused"), extra=extra,
        )  # fmt: skip

    def encode(self) -> bytes:
        """JSON for the job's key (the same bytes as ``json.dumps`` of it would be)."""
        value = {
            "format": FORMAT, "job": self.job, "token": self.token, "last_slot": self.last_slot,
            "runs": {},
        }  # fmt: skip
        for name in ("spec", "paused"):  # only when set: keys written before stay the same
            if getattr(self, name) is not None:
                value[name] = getattr(self, name)
        value.update(self.extra)
        # A JSON string escapes every '"' in it: the first "runs":{} is this dict's key.
        head, _, tail = _JSON.encode(value).partition('"runs":{}')
        encoded, parts = {}, []
        for slot, fields in self.runs.items():
            # Compared without a copy or a tuple per run: equal attributes encode the same (their
            # order too: an assignment keeps a key's place, a new key goes last in both).
            last = self._encoded.get(slot)
            if last is None or last[0] != vars(fields):
                last = (vars(fields).copy(), _JSON.encode(fields.values()))
            encoded[slot] = last
            parts.append(f'"{slot}":{last[1]}')
        self._encoded = encoded
        return f'{head}"runs":{{{",".join(parts)}}}{tail}'.encode()

    def may_be_archived(self, slot: int) -> bool:
        """Whether a run not in this key may still have a record in its archive key."""
        return slot not in self.runs and self.last_slot is not None and slot <= self.last_slot

    def to_archive(self) -> dict[int, RunFields]:
        """Finished runs beyond the newest ``KEEP_FINISHED``, once there are ``KEEP_FINISHED``
        more (so they move in batches, written at once): write them to their own keys first, then
        drop them from this key (:meth:`drop`)."""
        finished = [s for s, f in self.runs.items() if f.state in _FINAL]
        if len(finished) < 2 * KEEP_FINISHED:  # most steps: nothing to sort
            return {}
        finished.sort(key=abs, reverse=True)
        return {slot: self.runs[slot] for slot in finished[KEEP_FINISHED:]}

    def drop(self, slots: list[int]) -> None:
        """Forget archived runs."""
        for slot in slots:
            del self.runs[slot]
        self.changed = self.changed or bool(slots)

    # -- the lease steps -------------------------------------------------------------------

    def acquire(
        self, request: AcquireRequest, now_ms: int, archived: RunFields | None
    ) -> AcquireResult:
        """Decide one run with :func:`relay.lease_rules.decide` and apply the decision."""
        slot = run_key(request.slot, manual=request.manual)
        fields = self.runs.get(slot, archived)
        stored = None
        if fields is not None:
            stored = StoredRun(
                fields.run_state, fields.expires_ms, fields.failures, fields.max_attempts,
                fields.reason, fields.attempt,
            )  # fmt: skip
        other_live = self._other_live(slot, now_ms)
        waiting = any(f.state == "pending" and f.reason == BUFFERED for f in self.runs.values())
        decision = decide(
            stored, request, now_ms, other_live, paused=self.paused is not None, waiting=waiting
        )
        if decision.action is Action.SKIP:
            self._insert_skipped(slot, decision.reason or "", now_ms)
        elif decision.action is Action.BUFFER:
            self._insert(slot, RunFields("pending", max_attempts=request.max_attempts,
                                         reason=BUFFERED,
                                         schedule_version=request.schedule_version))  # fmt: skip
        elif decision.action is Action.FAIL:
            assert fields is not None
            self._set(fields, state="failed", failures=decision.failures, reason=decision.reason,
                      expires_ms=None, finished_ms=now_ms)  # fmt: skip
        elif decision.action is Action.LEASE:
            return AcquireResult(Outcome.WON, self._lease(request, slot, decision.failures, now_ms))
        return AcquireResult(decision.outcome)

    def start(self, slot: int, token: int, owner: str, lease: float, now_ms: int) -> Run:
        """Hand a running run to its runner (see ``LeaseBackend.start``)."""
        fields = self._held(slot, token)
        if fields.started_ms is not None and fields.owner != owner:
            raise started_elsewhere(self._id(slot), token, fields.owner)
        self._set(fields, owner=owner, started_ms=fields.started_ms or now_ms,
                  expires_ms=now_ms + _ms(lease))  # fmt: skip
        return Run(
            self._id(slot), self.job, from_ms(abs(slot)), fields.attempt, token, owner,
            schedule_version=fields.schedule_version,
        )  # fmt: skip

    def heartbeat(self, slot: int, token: int, lease: float, now_ms: int) -> None:
        """Renew a lease to ``now + lease``."""
        self._set(self._held(slot, token), expires_ms=now_ms + _ms(lease))

    def finish(
        self,
        slot: int,
        token: int,
        succeeded: bool,
        error: str | None,
        now_ms: int,
        archived: RunFields | None = None,
    ) -> RunState:
        """Record an attempt's outcome (see ``LeaseBackend.finish``); the same finish again
        returns what it recorded and changes nothing."""
        done = self.runs.get(slot) or archived
        if done is not None and done.token == token and done.state != "running":
            again = finished_again(done.state, done.reason)
            if again is not None:
                return again
        fields = self._held(slot, token)
        failures = fields.failures if succeeded else fields.failures + 1
        if succeeded:
            state = RunState.SUCCEEDED
        else:
            state = RunState.FAILED if failures >= fields.max_attempts else RunState.PENDING
        self._set(fields, state=state.value, failures=failures, error=error, expires_ms=None,
                  finished_ms=now_ms if state.final else None,
                  reason=None if succeeded else "failed")  # fmt: skip
        return state

    def release(self, slot: int, token: int) -> None:
        """Hand a run over: pending, not counted as a failure; a run not started yet gives its
        attempt back."""
        fields = self._held(slot, token)
        attempt = fields.attempt - (fields.started_ms is None)
        self._set(fields, state="pending", reason="released", expires_ms=None, attempt=attempt)

    def skip(self, slot: int, reason: str, now_ms: int, archived: RunFields | None) -> bool:
        """Record the run skipped unless it has a record."""
        if slot in self.runs or archived is not None:
            return False
        self._insert_skipped(slot, reason, now_ms)
        return True

    # -- the control plane -----------------------------------------------------------------

    def info(self) -> JobInfo:
        """The job as ``relay jobs`` shows it."""
        paused = self.paused or {}
        at = paused.get("at")
        return JobInfo(
            self.job, self.spec, None if at is None else from_ms(at), paused.get("by"),
            paused.get("reason"),
        )  # fmt: skip

    def register(self, spec: str) -> None:
        """Record the job's definition."""
        if self.spec != spec:
            self.spec, self.changed = spec, True

    def pause(self, reason: str, by: str, now_ms: int) -> bool:
        """Pause the job unless it is paused; ``True`` if it was not."""
        if self.paused is not None:
            return False
        self.paused, self.changed = {"at": now_ms, "by": by, "reason": reason}, True
        return True

    def resume(
        self, catch_up: float | None, now_ms: int, archived: dict[int, RunFields] | None = None
    ) -> list[str]:
        """Resume; with ``catch_up``, put back the paused slots that recent as pending runs
        (those in this key, and those ``archived`` to keys of their own)."""
        if self.paused is not None:
            self.paused, self.changed = None, True
        if catch_up is None:
            return []
        oldest = now_ms - _ms(catch_up)
        for slot, fields in (archived or {}).items():
            if slot not in self.runs and slot >= oldest and _paused_skip(fields):
                self.runs[slot] = fields  # back in the key, where pending runs live
        back = [
            slot for slot, fields in self.runs.items()
            if slot >= oldest and _paused_skip(fields)
        ]  # fmt: skip
        for slot in back:
            self._set(self.runs[slot], state="pending", reason="resumed", attempt=0,
                      finished_ms=None)  # fmt: skip
        return sorted(self._id(slot) for slot in back)

    def trigger(self, overlap_skip: bool, now_ms: int) -> RunRecord:
        """Record a manual run, pending (or skipped as an overlap while a run is live)."""
        slot = -now_ms
        if slot not in self.runs:
            if overlap_skip and self._other_live(slot, now_ms):
                self._insert_skipped(slot, "overlap", now_ms)
            else:
                self._insert(slot, RunFields("pending", reason="manual"))
        return self.runs[slot].record(self.job, slot)

    def backfill(
        self, slots: list[int], archived: dict[int, RunFields], reason: str = "backfill"
    ) -> list[bool]:
        """Record each slot pending (with ``reason``) unless it has a record."""
        created = []
        for slot in slots:
            new = slot not in self.runs and slot not in archived
            if new:
                self._insert(slot, RunFields("pending", reason=reason))
            created.append(new)
        return created

    def prune(self, cutoff_ms: int, limit: int) -> int:
        """Forget up to ``limit`` runs finished before ``cutoff_ms``, never the latest slot's."""
        old = [
            slot for slot, fields in self.runs.items()
            if fields.run_state.final and (fields.finished_ms or 0) < cutoff_ms
            and slot != self.last_slot
        ][:limit]  # fmt: skip
        self.drop(old)
        return len(old)

    def reclaimable(self, now_ms: int) -> list[RunRecord]:
        """Pending runs and running runs whose lease expired."""
        return [
            fields.record(self.job, slot)
            for slot, fields in self.runs.items()
            if fields.state == "pending"
            or (fields.state == "running" and (fields.expires_ms or 0) <= now_ms)
        ]

    # -- helpers ---------------------------------------------------------------------------

    def _lease(self, request: AcquireRequest, slot: int, failures: int, now_ms: int) -> Run:
        # At least the server's clock in µs: a server that lost its last writes (not yet fsynced,
        # or memory storage) never hands a token out twice; a clock gone back leaves the + 1.
        self.token = max(self.token + 1, now_ms * 1000)
        fields = self.runs.get(slot)
        if fields is None:
            fields = self._insert(slot, RunFields("running", max_attempts=request.max_attempts))
        elif fields.attempt == 0:  # never leased yet: the job's max_attempts applies from now on
            fields.max_attempts = request.max_attempts
        if fields.schedule_version is None:  # a takeover or a retry keeps the first version
            fields.schedule_version = request.schedule_version
        self._set(fields, state="running", attempt=fields.attempt + 1, failures=failures,
                  token=self.token, owner=request.owner, reason=None, started_ms=None,
                  expires_ms=now_ms + _ms(request.lease))  # fmt: skip
        return Run(
            self._id(slot), self.job, request.slot, fields.attempt, self.token, request.owner,
            schedule_version=fields.schedule_version,
        )  # fmt: skip

    def _insert_skipped(self, slot: int, reason: str, now_ms: int) -> None:
        self._insert(slot, RunFields("skipped", reason=reason, finished_ms=now_ms))

    def _insert(self, slot: int, fields: RunFields) -> RunFields:
        self.runs[slot] = fields
        if slot >= 0:  # a manual run is not a slot
            self.last_slot = slot if self.last_slot is None else max(self.last_slot, slot)
        self.changed = True
        return fields

    def _set(self, fields: RunFields, **values: Any) -> None:
        for name, value in values.items():
            setattr(fields, name, value)
        self.changed = True

    def _held(self, slot: int, token: int) -> RunFields:
        fields = self.runs.get(slot)
        found = None if fields is None else (fields.state, fields.token)
        if fields is None or not is_held(found, token):
            raise lease_lost(self._id(slot), token, found)
        return fields

    def _other_live(self, slot: int, now_ms: int) -> bool:
        return any(
            other != slot and fields.state == "running" and (fields.expires_ms or 0) > now_ms
            for other, fields in self.runs.items()
        )

    def _id(self, slot: int) -> str:
        return key_id(self.job, slot)


def _paused_skip(fields: RunFields) -> bool:
    return fields.state == "skipped" and fields.reason == "paused"
