"""NATS KV's stored schedules beyond the contract: what the feed of an instance reads and writes.

An instance polls ``schedule_changes`` every tick, so its cost decides how soon an edit is seen:
after one change it is the read of ``schedules.rev`` alone (that key holds the change), and it
writes nothing, even when the writer died between its commit and its roll-forward.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay import BackendUnavailable, Control, open_backend
from relay.backends.nats_kv import NatsLeaseBackend
from relay.schedule_store import ScheduleWrite

pytestmark = pytest.mark.nats_kv


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[NatsLeaseBackend]:
    from tests.support.nats_server import nats_kv_lease

    with nats_kv_lease(tmp_path) as url:
        opened = open_backend(url)
        assert isinstance(opened, NatsLeaseBackend)
        yield opened
        opened.close()


class Counted:
    """Counts the backend's reads and writes of KV keys (it still sends each to the server)."""

    def __init__(self, backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gets: list[str] = []
        self.swaps: list[str] = []
        get, swap = backend._get, backend._swap

        async def counted_get(key: str) -> Any:
            self.gets.append(key)
            return await get(key)

        async def counted_swap(key: str, value: bytes, revision: int) -> int:
            self.swaps.append(key)
            return await swap(key, value, revision)

        monkeypatch.setattr(backend, "_get", counted_get)
        monkeypatch.setattr(backend, "_swap", counted_swap)


def last_sequence(backend: NatsLeaseBackend) -> int:
    async def read() -> int:
        info = await backend._js.stream_info(backend._stream)
        return int(info.state.last_seq)

    return backend._call(read())


def test_one_change_costs_the_feed_one_read_and_no_write(
    backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = Control(backend)
    control.add_schedule("a", "t", every=60, force=True)
    control.add_schedule("b", "t", every=60, force=True)
    seen = backend.schedule_changes(0)[-1].revision
    control.update_schedule("a", version=1, every=30)
    stream_at = last_sequence(backend)
    counted = Counted(backend, monkeypatch)
    (row,) = backend.schedule_changes(seen)
    assert (row.name, row.version, row.revision) == ("a", 2, seen + 1)
    assert counted.gets == ["schedules.rev"] and counted.swaps == []
    control.update_schedule("b", version=1, every=30)
    control.remove_schedule("a")
    counted.gets.clear()
    counted.swaps.clear()
    rows = backend.schedule_changes(row.revision)
    assert [(r.name, r.version, r.definition is None) for r in rows] == [
        ("b", 2, False), ("a", 3, True)]  # fmt: skip
    assert counted.swaps == [] and len(counted.gets) == 3  # the revision, one log entry, one row
    monkeypatch.undo()
    assert last_sequence(backend) == stream_at + 2 * 4  # two changes' writes; none by the feed


def test_a_change_whose_writer_died_before_rolling_it_forward_is_seen(
    backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = Control(backend)
    control.add_schedule("a", "t", every=60, force=True)
    (added,) = backend.schedule_changes(0)
    roll_forward = backend._roll_forward
    dead = True

    async def dies_after_commit(change: dict[str, Any]) -> None:
        if not dead:
            await roll_forward(change)

    monkeypatch.setattr(backend, "_roll_forward", dies_after_commit)
    control.update_schedule("a", version=1, every=30)  # committed on schedules.rev only
    dead = False
    stale, _ = backend._call(backend._get("schedules.row." + _encoded("a")))
    assert stale is not None and json.loads(stale)["version"] == 1  # not rolled forward
    (row,) = backend.schedule_changes(added.revision)
    assert (row.name, row.version) == ("a", 2)
    (full,) = backend.schedule_changes(0)  # a reader starting now sees it too
    assert full.version == 2
    # The next writer rolls it forward before its own commit: both are seen, in order.
    control.add_schedule("b", "t", every=60, force=True)
    rows = backend.schedule_changes(added.revision)
    assert [(r.name, r.version) for r in rows] == [("a", 2), ("b", 1)]
    assert [c.version for c in control.schedule_history("a")] == [1, 2]


def _encoded(name: str) -> str:
    from relay.backends.nats_kv import _encode

    return _encode(name)


def test_many_changes_are_read_in_flight_at_once(backend: NatsLeaseBackend) -> None:
    control = Control(backend)
    for n in range(40):
        control.add_schedule(f"s{n}", "t", every=60, force=True)
    first = backend.schedule_changes(0)
    for n in range(0, 40, 2):
        control.update_schedule(f"s{n}", version=1, every=30)
    rows = backend.schedule_changes(first[-1].revision)
    assert [r.name for r in rows] == [f"s{n}" for n in range(0, 40, 2)]
    assert all(r.version == 2 for r in rows) and rows == sorted(rows, key=lambda r: r.revision)


@pytest.mark.parametrize("batch", [4, 500])
def test_a_starting_reader_pages_through_the_feed_each_row_once_at_its_last_change(
    backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    from relay.backends import _nats_schedules

    monkeypatch.setattr(_nats_schedules, "FULL_READ", batch)
    control = Control(backend)
    for n in range(12):
        control.add_schedule(f"s{n}", "t", every=60, force=True)
    for i, n in enumerate((3, 7, 3, 11)):  # s3 twice: its first edit's entry names a moved row
        version = control.schedule(f"s{n}").version
        control.update_schedule(f"s{n}", version=version, description=str(i))
    control.remove_schedule("s5")
    paged, since = [], 0
    while rows := backend.schedule_changes(since, 5):
        assert len(rows) <= 5
        paged += rows
        since = rows[-1].revision
    everything = backend.schedule_changes(0)  # no limit: the whole bucket listed at once
    assert paged == everything
    assert sorted(r.name for r in paged) == sorted(f"s{n}" for n in range(12))  # each once
    assert [r.revision for r in paged] == sorted(r.revision for r in paged)
    versions = {r.name: (r.version, r.definition is None) for r in paged}
    assert versions["s3"] == (3, False) and versions["s5"] == (2, True)
    assert versions["s11"] == (2, False) and versions["s0"] == (1, False)


def _batch(names: list[str]) -> list[ScheduleWrite]:
    return [ScheduleWrite("add", n, '{"every": 60}', "{}") for n in names]


def _staged_keys(backend: NatsLeaseBackend) -> list[str]:
    return [e.key for e in backend._call(backend._watch("schedules.batch.>", meta_only=True))]


def test_a_batch_staged_but_not_committed_is_seen_by_nobody_and_pruned(
    backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import relay.backends._nats_schedules as steps

    backend.apply_schedules(_batch(["a"]), "ann")
    swap = backend._swap

    async def dies_before_commit(key: str, value: bytes, revision: int) -> int:
        if key == "schedules.rev" and b'"batch"' in value:
            raise BackendUnavailable("the writer died here")
        return await swap(key, value, revision)

    monkeypatch.setattr(backend, "_swap", dies_before_commit)
    monkeypatch.setattr(steps, "CHUNK_BYTES", 200)  # several staged keys
    with pytest.raises(BackendUnavailable):
        backend.apply_schedules(_batch([f"s{n}" for n in range(20)]), "ann")
    monkeypatch.setattr(backend, "_swap", swap)
    assert len(_staged_keys(backend)) > 1
    assert [r.name for r in backend.schedule_changes(0)] == ["a"]
    assert [r.name for r in backend.stored_schedules()] == ["a"]
    assert backend.prune_schedules(0) == 0 and len(_staged_keys(backend)) > 1  # not yet old
    monkeypatch.setattr(steps, "STAGED_FOR_MS", 0)
    backend.prune_schedules(0)
    assert _staged_keys(backend) == []
    backend.apply_schedules(_batch(["s1"]), "ann")
    assert [(r.name, r.revision) for r in backend.schedule_changes(0)] == [("a", 1), ("s1", 2)]


def test_a_batch_whose_writer_died_after_its_commit_is_seen_whole(
    backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import relay.backends._nats_schedules as steps

    backend.apply_schedules(_batch(["a"]), "ann")
    roll_forward = backend._roll_forward

    async def dies_after_commit(change: dict[str, Any]) -> None:
        if "batch" not in change:
            await roll_forward(change)
        else:
            raise BackendUnavailable("the writer died here")

    monkeypatch.setattr(backend, "_roll_forward", dies_after_commit)
    monkeypatch.setattr(steps, "CHUNK_BYTES", 200)
    names = [f"s{n:02}" for n in range(20)]
    backend.apply_schedules(_batch(names), "ann")  # committed: the copies are logged as not done
    monkeypatch.setattr(backend, "_roll_forward", roll_forward)
    staged = _staged_keys(backend)
    assert len(staged) > 1
    counted = Counted(backend, monkeypatch)
    rows = backend.schedule_changes(1)  # from the staged keys, writing nothing
    assert [(r.name, r.revision) for r in rows] == [(n, i) for i, n in enumerate(names, 2)]
    assert counted.swaps == []
    assert [r.name for r in backend.schedule_changes(0)] == ["a", *names]
    # The next writer rolls it forward, then commits its own change after it.
    backend.apply_schedules(_batch(["b"]), "ann")
    assert [r.name for r in backend.schedule_changes(1)] == [*names, "b"]
    assert all(len(backend.schedule_history(n)) == 1 for n in names)
    assert set(_staged_keys(backend)) == set(staged)  # the dead writer's: pruned an hour on
    monkeypatch.setattr(steps, "STAGED_FOR_MS", 0)
    backend.prune_schedules(0)
    assert _staged_keys(backend) == []


def test_a_committed_batch_leaves_no_staged_key_and_settles(backend: NatsLeaseBackend) -> None:
    backend.apply_schedules(_batch([f"s{n}" for n in range(600)]), "ann")
    assert _staged_keys(backend) == []
    latest, _ = backend._call(backend._get("schedules.rev"))
    assert latest is not None and json.loads(latest) == {"revision": 600}
    assert len(backend.schedule_changes(0)) == 600 and len(backend.stored_schedules()) == 600
