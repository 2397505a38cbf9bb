"""The NATS KV lease backend's stored schedules (:mod:`relay.schedule_store`).

A KV bucket swaps one key at a time, so a change commits on one key and is then rolled forward:

* ``schedules.rev`` holds the store-wide revision **and the latest change** (its row and history
  entry). A change reads it, rolls forward the change it holds (below), checks the schedule's
  version, and swaps it on the revision it read: that swap is the commit, and concurrent changes
  lose it and start again. So every change is serialised, and only the latest can be unapplied;
* rolling forward a change writes its copies, each idempotent: the schedule's row
  ``schedules.row.<name>`` (unless it already holds that version or a later one), its history
  entry ``schedules.hist.<name>.<version>`` and the feed entry ``schedules.log.<revision>`` (each
  created only if absent). The writer does it at once; if it died first, the next writer does it
  (before its own commit), or a reader of a schedule, its history or the list of them.

A batch (:meth:`apply_schedules`, all or nothing) cannot fit one value, so it is staged, then
committed by the same one swap:

* its changes, checked against every row, are written first to staged keys
  ``schedules.batch.<id>.<n>`` (chunks of a few hundred KB) that nothing reads yet;
* ``schedules.rev`` is then swapped to the batch's last revision and its id: the commit. Until
  then no reader sees any of it, and a writer that dies before leaves only staged keys, which
  :meth:`prune_schedules` deletes an hour on. A lost swap (a change committed meanwhile) stages the
  batch again, checked against the rows as they are now;
* rolling the batch forward writes the copies of each of its changes as above; then the writer
  drops the batch from ``schedules.rev`` (its revision stays) and deletes the staged keys. Until
  it has, a reader of the feed reads the staged keys for the batch's rows, and the next writer
  rolls it forward before its own commit, as it does a single change. Staged keys already
  deleted mean the batch was rolled forward: the reader reads ``schedules.rev`` again.

An idle tick reads ``schedules.rev`` alone, and so does a tick after one change (``schedules.rev``
holds its row); after more, one feed entry and one row per change, many in flight at once. A
reader starting reads the feed the same way, page by page; only a read of every change at once
(no ``limit``) far behind lists every row instead. Readers of the feed write nothing: every
change but the latest was rolled forward before the latest was committed. Names are base64url in
keys, as job names are.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar
from uuid import uuid4

from nats.js.kv import KeyValue

from relay.backends._ms import ms
from relay.backends._nats_kv_state import key_token as _encode
from relay.errors import BackendUnavailable, Conflict
from relay.runs import from_ms
from relay.schedule_store import ScheduleWrite, checked_write
from relay.stored import ScheduleChange, StoredRow

__all__ = ["NatsSchedules"]

T = TypeVar("T")
log = logging.getLogger("relay.backends.nats")
REVISION = "schedules.rev"
CAS_TRIES = 64
FULL_READ = 500
"""Feed entries read at once; a read of every change (no ``limit``) this many revisions behind
lists every row instead."""
CHUNK_BYTES = 256 * 1024
"""The size of one staged key of a batch, well under NATS's default limit of a message (1 MB)."""
STAGED_FOR_MS = 3_600_000
"""How long staged keys no commit names stay, for a writer still committing them."""
Made = tuple[dict[str, Any], str] | None
"""What a change makes of the current row: the new row's fields and the action, or ``None``."""


class NatsSchedules:
    """Mixed into :class:`~relay.backends.nats_kv.NatsLeaseBackend`."""

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None, jobs: int = 0) -> T:
        raise NotImplementedError

    async def _get(self, key: str) -> tuple[bytes | None, int]:
        raise NotImplementedError

    async def _swap(self, key: str, value: bytes, revision: int) -> int:
        raise NotImplementedError

    async def _now_ms(self) -> int:
        raise NotImplementedError

    async def _watch(self, keys: str, *, meta_only: bool) -> list[KeyValue.Entry]:
        raise NotImplementedError

    async def _purge(self, key: str, before: int | None = None) -> None:
        raise NotImplementedError

    # -- the contract ------------------------------------------------------------------------

    def add_schedule(self, name: str, definition: str, changes: str, by: str) -> StoredRow:
        def make(current: dict[str, Any] | None) -> Made:
            if current is not None and not current["removed"]:
                raise _conflict(current, None)
            return _fields(name, definition, current, by, created=True), "add"

        row = self._call(self._commit(name, changes, make))
        assert row is not None
        return row

    def update_schedule(
        self, name: str, definition: str, changes: str, by: str, version: int
    ) -> StoredRow | None:
        return self._change(name, definition, changes, by, version)

    def remove_schedule(
        self, name: str, changes: str, by: str, version: int | None
    ) -> StoredRow | None:
        return self._change(name, None, changes, by, version)

    def apply_schedules(self, writes: Sequence[ScheduleWrite], by: str) -> None:
        if not writes:
            return
        change = self._call(self._commit_batch(list(writes), by), jobs=len(writes))
        try:  # the copies: three writes a change, with a deadline of their own
            self._call(self._roll_forward_batch(change), jobs=4 * len(writes))
        except BackendUnavailable as exc:  # committed all the same: the next reader rolls it
            log.warning("stored schedules: batch committed, its copies not all written: %s", exc)

    def stored_schedule(self, name: str) -> StoredRow | None:
        async def read() -> StoredRow | None:
            await self._roll_forward(await self._latest())
            data, _ = await self._get(_row_key(name))
            row = None if data is None else _row(json.loads(data))
            return None if row is None or row.definition is None else row

        return self._call(read())

    def stored_schedules(self) -> list[StoredRow]:
        async def read() -> list[StoredRow]:
            await self._roll_forward(await self._latest())
            return [r for r in await self._all_rows() if r.definition is not None]

        return sorted(self._call(read()), key=lambda r: r.name)

    def schedule_history(self, name: str) -> list[ScheduleChange]:
        async def read() -> list[ScheduleChange]:
            await self._roll_forward(await self._latest())
            entries = await self._watch(f"schedules.hist.{_encode(name)}.*", meta_only=False)
            return [_change(name, json.loads(e.value)) for e in entries if e.value]

        return sorted(self._call(read()), key=lambda c: c.version)

    def schedule_changes(self, since: int, limit: int | None = None) -> list[StoredRow]:
        return self._call(self._changes_since(since, limit))

    def prune_schedules(self, older_than: float, limit: int = 500) -> int:
        # The history first, version by version, then the row up to the one read here: a
        # schedule added again meanwhile continues its versions from that row (it was still
        # there), and its new row and history come after it, so none of them is purged.
        async def prune() -> int:
            await self._settle()
            cutoff = await self._now_ms() - ms(older_than)
            entries = await self._watch("schedules.row.*", meta_only=False)
            old = [
                (entry.revision, fields)
                for entry in entries if entry.value
                for fields in (json.loads(entry.value),)
                if fields["removed"] and int(fields["updated_ms"]) < cutoff
            ][:limit]  # fmt: skip
            for revision, fields in old:
                encoded = _encode(fields["name"])
                for version in range(1, int(fields["version"]) + 1):
                    await self._purge(f"schedules.hist.{encoded}.{version}")
                await self._purge(f"schedules.row.{encoded}", before=(revision or 0) + 1)
            await self._drop_abandoned(cutoff=await self._now_ms() - STAGED_FOR_MS)
            return len(old)

        return self._call(prune())

    # -- steps -------------------------------------------------------------------------------

    def _change(
        self, name: str, definition: str | None, changes: str, by: str, version: int | None
    ) -> StoredRow | None:
        def make(current: dict[str, Any] | None) -> Made:
            if current is None or current["removed"]:
                return None
            if version is not None and version != current["version"]:
                raise _conflict(current, version)
            return _fields(name, definition, current, by), "update" if definition else "remove"

        return self._call(self._commit(name, changes, make))

    async def _commit(
        self, name: str, changes: str, make: Callable[[dict[str, Any] | None], Made]
    ) -> StoredRow | None:
        for _ in range(CAS_TRIES):
            data, at = await self._get(REVISION)
            latest = json.loads(data) if data else {"revision": 0}
            await self._roll_forward(latest)
            current, _ = await self._get(_row_key(name))
            made = make(None if current is None else json.loads(current))
            if made is None:
                return None
            fields, action = made
            fields.update(revision=latest["revision"] + 1, updated_ms=await self._now_ms())
            if fields["created_ms"] is None:
                fields["created_ms"] = fields["updated_ms"]
            entry = {"version": fields["version"], "at_ms": fields["updated_ms"],
                     "by": fields["updated_by"], "action": action, "changes": changes}  # fmt: skip
            change = {"revision": fields["revision"], "row": fields, "history": entry}
            if await self._swap(REVISION, json.dumps(change).encode(), at):
                await self._roll_forward(change)
                return _row(fields)
        raise BackendUnavailable(f"{CAS_TRIES} changes of stored schedules in a row lost a race")

    async def _commit_batch(self, writes: list[ScheduleWrite], by: str) -> dict[str, Any]:
        """Check, stage and commit ``writes`` (see the module's docstring); return the commit."""
        for _ in range(CAS_TRIES):
            data, at = await self._get(REVISION)
            latest = json.loads(data) if data else {"revision": 0}
            await self._roll_forward(latest)
            rows = {
                fields["name"]: (fields, entry.revision or 0)
                for entry in await self._watch("schedules.row.*", meta_only=False)
                if entry.value
                for fields in (json.loads(entry.value),)
            }
            now = await self._now_ms()
            staged = [
                _staged(write, rows.get(write.name), by, revision, now)
                for revision, write in enumerate(writes, start=int(latest["revision"]) + 1)
            ]
            batch = f"{now}-{uuid4().hex}"
            chunks = _chunked(staged)
            keys = [f"schedules.batch.{batch}.{n}" for n in range(len(chunks))]
            await asyncio.gather(*(self._swap(k, c, 0) for k, c in zip(keys, chunks, strict=True)))
            change = {"revision": staged[-1]["revision"], "batch": batch, "chunks": len(chunks)}
            if await self._swap(REVISION, json.dumps(change).encode(), at):
                return change
            await asyncio.gather(*(self._purge(key) for key in keys))
        raise BackendUnavailable(f"{CAS_TRIES} changes of stored schedules in a row lost a race")

    async def _roll_forward_batch(self, change: dict[str, Any]) -> None:
        """Roll a committed batch forward, settle it, then delete its staged keys."""
        await self._roll_forward(change)
        await self._settle()
        keys = [f"schedules.batch.{change['batch']}.{n}" for n in range(int(change["chunks"]))]
        await asyncio.gather(*(self._purge(key) for key in keys))

    async def _pending(self, change: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The changes (revision, row, history entry) a commit holds; ``None`` if it was a
        batch whose staged keys are gone (it was rolled forward and dropped meanwhile)."""
        if "batch" not in change:
            return [change] if change.get("row") is not None else []
        keys = [f"schedules.batch.{change['batch']}.{n}" for n in range(int(change["chunks"]))]
        read = await asyncio.gather(*(self._get(key) for key in keys))
        if any(data is None for data, _ in read):
            return None
        return [entry for data, _ in read if data is not None for entry in json.loads(data)]

    async def _drop_abandoned(self, cutoff: int) -> None:
        """Delete the staged keys of batches begun before ``cutoff`` (ms) and not committed."""
        latest = await self._latest()
        for entry in await self._watch("schedules.batch.>", meta_only=True):
            batch = entry.key.split(".")[-2]
            if batch != latest.get("batch") and int(batch.partition("-")[0]) < cutoff:
                await self._purge(entry.key)

    async def _settle(self) -> None:
        """Roll the latest change forward and drop it from ``schedules.rev`` (its revision
        stays): a reader would otherwise write its row again after a prune deleted it."""
        for _ in range(CAS_TRIES):
            data, at = await self._get(REVISION)
            latest = json.loads(data) if data else {"revision": 0}
            if latest.get("row") is None and "batch" not in latest:
                return
            await self._roll_forward(latest)
            if await self._swap(
                REVISION, json.dumps({"revision": latest["revision"]}).encode(), at
            ):
                return
        raise BackendUnavailable(f"{CAS_TRIES} changes of stored schedules in a row lost a race")

    async def _latest(self) -> dict[str, Any]:
        data, _ = await self._get(REVISION)
        return json.loads(data) if data else {"revision": 0}

    async def _roll_forward(self, change: dict[str, Any]) -> None:
        """Write the copies of the committed ``change`` (or batch) that are missing, each
        idempotent: :data:`FULL_READ` changes of a batch at once."""
        entries = await self._pending(change) or []
        for first in range(0, len(entries), FULL_READ):
            await asyncio.gather(*map(self._roll_one, entries[first : first + FULL_READ]))

    async def _roll_one(self, change: dict[str, Any]) -> None:
        """Write the copies of one committed change, all at once: its row, history entry and
        feed entry."""
        row = change["row"]
        encoded = _encode(row["name"])
        history = json.dumps(change["history"]).encode()
        await asyncio.gather(
            self._roll_row(row, change.get("row_at")),
            self._swap(f"schedules.hist.{encoded}.{row['version']}", history, 0),
            self._swap(f"schedules.log.{change['revision']}", row["name"].encode(), 0),
        )

    async def _roll_row(self, row: dict[str, Any], at: int | None) -> None:
        """Write ``row`` unless its key holds that version or a later one; ``at``, the key's
        revision when a batch was checked, saves a read when the key has not moved since."""
        key, value = f"schedules.row.{_encode(row['name'])}", json.dumps(row).encode()
        if at is not None and await self._swap(key, value, at):
            return
        for _ in range(CAS_TRIES):
            data, at = await self._get(key)
            if data is not None and json.loads(data)["version"] >= row["version"]:
                return
            if await self._swap(key, value, at):
                return

    async def _changes_since(self, since: int, limit: int | None) -> list[StoredRow]:
        for _ in range(CAS_TRIES):
            latest = await self._latest()
            top = int(latest["revision"])
            if top <= since:
                return []  # the idle tick: one read
            # A reader writes nothing and waits on nobody: every revision below the latest
            # commit's was rolled forward before it was committed (a change rolls its
            # predecessor forward first), and the latest commit's rows are in `latest` or its
            # staged keys (or, once settled, rolled forward like the others). One change per
            # tick costs that one read.
            entries = await self._pending(latest)
            if entries is not None:
                break
        else:
            raise BackendUnavailable(f"{CAS_TRIES} batches of stored schedules in a row went by")
        pending = {row.name: row for row in (_row(e["row"]) for e in entries)}
        if limit is None and top - since > FULL_READ:
            rows = {r.name: r for r in await self._all_rows()} | pending
            # A row changed after `top` waits for the next read: returning it now would make the
            # caller skip the changes between `top` and it.
            found = [r for r in rows.values() if since < r.revision <= top]
            return sorted(found, key=lambda r: r.revision)
        return await self._walk(since, top, pending, limit)

    async def _walk(
        self, since: int, top: int, pending: dict[str, StoredRow], limit: int | None
    ) -> list[StoredRow]:
        """The feed from ``since``: each revision's entry names a row, returned if that revision
        is still its last change (else it comes later, at its own). The rows of the latest
        commit are ``pending`` (by name). :data:`FULL_READ` entries and their rows in flight at
        once, until ``limit`` rows: a reader starting on 100,000 schedules reads them page by
        page, never the whole bucket per page."""
        held = {row.revision: row.name for row in pending.values()}
        found: list[StoredRow] = []
        at = since + 1
        while at <= top and (limit is None or len(found) < limit):
            revisions = range(at, min(top, at + FULL_READ - 1) + 1)
            logged = iter(
                await asyncio.gather(
                    *(self._get(f"schedules.log.{r}") for r in revisions if r not in held)
                )
            )
            names = [held[r] if r in held else _name(next(logged)[0]) for r in revisions]
            wanted = {n for n in names if n is not None and n not in pending}
            read = await asyncio.gather(*(self._get(_row_key(n)) for n in wanted))
            rows = {r.name: r for r in (_row(json.loads(d)) for d, _ in read if d is not None)}
            rows |= pending
            for revision, name in zip(revisions, names, strict=True):
                row = rows.get(name) if name is not None else None
                if row is not None and row.revision == revision:
                    found.append(row)
            at = revisions[-1] + 1
        return found if limit is None else found[:limit]

    async def _row_fields(self) -> list[dict[str, Any]]:
        entries = await self._watch("schedules.row.*", meta_only=False)
        return [json.loads(e.value) for e in entries if e.value]

    async def _all_rows(self) -> list[StoredRow]:
        return [_row(fields) for fields in await self._row_fields()]


def _fields(
    name: str,
    definition: str | None,
    current: dict[str, Any] | None,
    by: str,
    *,
    created: bool = False,
) -> dict[str, Any]:
    return {
        "name": name, "definition": definition or "", "removed": definition is None,
        "version": 1 if current is None else int(current["version"]) + 1, "updated_by": by,
        "created_ms": None if created or current is None else current["created_ms"],
    }  # fmt: skip


def _staged(
    write: ScheduleWrite, read: tuple[dict[str, Any], int] | None, by: str, revision: int, now: int
) -> dict[str, Any]:
    """One change of a batch, checked against the schedule's row as ``read`` (its fields and its
    key's revision), as committed."""
    current, at = read if read is not None else (None, 0)
    checked_write(None if current is None else _row(current), write)
    fields = _fields(write.name, write.definition, current, by, created=write.action == "add")
    fields.update(revision=revision, updated_ms=now)
    if fields["created_ms"] is None:
        fields["created_ms"] = now
    entry = {"version": fields["version"], "at_ms": now, "by": by, "action": write.action,
             "changes": write.changes}  # fmt: skip
    return {"revision": revision, "row": fields, "history": entry, "row_at": at}


def _chunked(staged: list[dict[str, Any]]) -> list[bytes]:
    """``staged`` as JSON lists of at most about :data:`CHUNK_BYTES` each."""
    chunks: list[bytes] = []
    parts: list[str] = []
    size = 0
    for change in staged:
        text = json.dumps(change)
        if parts and size + len(text) > CHUNK_BYTES:
            chunks.append(f"[{','.join(parts)}]".encode())
            parts, size = [], 0
        parts.append(text)
        size += len(text) + 1
    chunks.append(f"[{','.join(parts)}]".encode())
    return chunks


def _name(data: bytes | None) -> str | None:
    return data.decode() if data else None


def _conflict(current: dict[str, Any], expected: int | None) -> Conflict:
    return Conflict(
        current["name"], version=int(current["version"]),
        at=from_ms(int(current["updated_ms"])), by=current["updated_by"], expected=expected,
    )  # fmt: skip


def _row(fields: dict[str, Any]) -> StoredRow:
    return StoredRow(
        fields["name"], None if fields["removed"] else fields["definition"],
        int(fields["version"]), int(fields["revision"]), from_ms(int(fields["updated_ms"])),
        fields["updated_by"], from_ms(int(fields["created_ms"])),
    )  # fmt: skip


def _change(name: str, entry: dict[str, Any]) -> ScheduleChange:
    return ScheduleChange(
        name, int(entry["version"]), from_ms(int(entry["at_ms"])), entry["by"],
        entry["action"], json.loads(entry["changes"]),
    )  # fmt: skip


def _row_key(name: str) -> str:
    return f"schedules.row.{_encode(name)}"
