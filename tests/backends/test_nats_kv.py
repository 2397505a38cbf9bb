"""The NATS KV lease backend beyond the contract: server version, options, clock, archive, restarts.

The lease contract suite (tests/contract) holds the backend to the lease rules; these tests check
what is particular to NATS, against real servers: the session's NATS 2.15 and the machine's older
NATS on 4222 for the version refusal.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nats
import pytest

from relay import AcquireRequest, LeaseBackend, Outcome, RunState, open_backend
from relay.backends._nats_kv_state import KEEP_FINISHED
from relay.backends.nats_kv import NatsLeaseBackend
from relay.errors import BackendUnavailable, ConfigurationError, LeaseLost
from tests.support import services
from tests.support.nats_server import NatsServer, delete_bucket, find_binary
from tests.support.ports import free_port
from tests.support.waiting import lease_ran_out

UTC = timezone.utc
JOB = "nightly report/é"  # a name NATS keys could not hold as it is


# Fixed once, so that every call in a test names the same runs, whatever minute it is.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def slot(index: int) -> datetime:
    return BASE + timedelta(seconds=index)


def req(index: int = 0, owner: str = "a", lease: float = 30, **options: object) -> AcquireRequest:
    return AcquireRequest(job=JOB, slot=slot(index), owner=owner, lease=lease, **options)  # type: ignore[arg-type]


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    from tests.support.nats_server import nats_kv_lease

    with nats_kv_lease(tmp_path) as url:
        yield url


@pytest.fixture
def backend(nats_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(nats_url)
    assert isinstance(opened, NatsLeaseBackend)
    yield opened
    opened.close()


def stream_config(url: str, bucket: str) -> dict[str, object]:
    async def read() -> dict[str, object]:
        nc = await nats.connect(url)
        try:
            reply = await nc.request(f"$JS.API.STREAM.INFO.KV_{bucket}", b"", timeout=5)
        finally:
            await nc.close()
        config: dict[str, object] = json.loads(reply.data)["config"]
        return config

    return asyncio.run(read())


# -- opening -----------------------------------------------------------------------------------


@pytest.mark.nats
def test_a_server_older_than_2_10_is_refused_with_the_fix() -> None:
    url = services.require("nats")
    version = asyncio.run(_server_version(url))
    if version >= (2, 10):
        pytest.skip(f"the shared NATS at {url} is {version}: new enough, nothing to refuse")
    with pytest.raises(ConfigurationError) as caught:
        open_backend(f"{url}?bucket=relay_never_created")
    message = str(caught.value)
    assert "2.10 or newer" in message and "strategy=dedup" in message
    assert ".".join(map(str, version)) in message


async def _server_version(url: str) -> tuple[int, int, int]:
    nc = await nats.connect(url)
    version = nc.connected_server_version
    await nc.close()
    return version.major, version.minor, version.patch


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ("colour=blue", "does not know the URL option(s) colour"),
        ("bucket=a.b", "not a valid KV bucket name"),
        ("storage=disk", "storage='disk' is not known"),
        ("replicas=0", "replicas='0' must be a whole number"),
        ("history=65", "history='65' must be a whole number"),
    ],
)
def test_bad_url_options_are_refused_before_connecting(query: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        open_backend(f"nats://127.0.0.1:1?{query}")


def test_no_server_gives_backend_unavailable_naming_what_to_check() -> None:
    with pytest.raises(BackendUnavailable, match=r"cannot connect to NATS at nats://127\.0\.0\.1"):
        open_backend(f"nats://127.0.0.1:{free_port()}?timeout=1")


@pytest.mark.nats_kv
def test_bucket_is_created_for_durability(backend: NatsLeaseBackend, nats_url: str) -> None:
    config = stream_config(nats_url.split("?")[0], backend.bucket)
    assert config["storage"] == "file"
    assert config["max_msgs_per_subject"] == 5  # history
    assert config["allow_direct"] is False  # reads go to the stream leader, never a stale replica
    assert config["num_replicas"] == 1


@pytest.mark.nats_kv
def test_a_bucket_with_other_storage_is_refused(nats_url: str) -> None:
    open_backend(nats_url + "&storage=memory").close()
    with pytest.raises(ConfigurationError, match="uses memory storage, but the URL asks for file"):
        open_backend(nats_url)


# -- the server's clock ---------------------------------------------------------------------------


@pytest.mark.nats_kv
def test_decisions_ignore_the_instances_clock(
    backend: NatsLeaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_now = backend.now()
    monkeypatch.setattr(time, "time", lambda: time.monotonic() + 10**9)  # an absurd local clock
    # stale_after 1 h and the slot 30 min old by the server's clock: not stale
    result = backend.acquire(req(0, lease=3, stale_after=3600, max_attempts=2))
    assert result.outcome is Outcome.WON and result.run is not None
    (record,) = backend.runs(JOB)
    assert record.expires_at is not None
    assert timedelta(0) < record.expires_at - server_now < timedelta(seconds=5)
    assert backend.acquire(req(0, owner="b")).outcome is Outcome.HELD
    monkeypatch.undo()
    lease_ran_out(backend, result.run.id)
    assert backend.acquire(req(0, owner="b")).outcome is Outcome.WON


# -- the job's key stays small ---------------------------------------------------------------------


@pytest.mark.nats_kv
def test_finished_runs_move_to_their_own_keys_and_stay_finished(backend: NatsLeaseBackend) -> None:
    total = KEEP_FINISHED + 8
    for index in range(total):
        run = backend.acquire(req(index)).run
        assert run is not None
        backend.finish(run.id, run.token, succeeded=index % 2 == 0)
    live = backend.acquire(req(total)).run
    assert live is not None
    assert len(backend.runs(JOB, limit=1000)) == total + 1
    assert [r.scheduled_for for r in backend.runs(JOB, limit=3)] == [
        slot(total - i) for i in range(3)
    ]
    oldest = backend.runs(JOB, limit=1000)[-1]
    assert (oldest.scheduled_for, oldest.state) == (slot(0), RunState.SUCCEEDED)
    assert backend.acquire(req(0, owner="late")).outcome is Outcome.FINISHED
    assert backend.skip(JOB, slot(1), "missed") is False
    assert backend.last_slot(JOB) == slot(total)
    assert [r.id for r in backend.runs(limit=1)] == [live.id]


# -- a server restart ------------------------------------------------------------------------------


@pytest.mark.nats_kv
@pytest.mark.slow
def test_leases_survive_a_server_restart_and_the_backend_reconnects(tmp_path: Path) -> None:
    binary = find_binary()
    if binary is None:
        pytest.skip("no nats-server binary >= 2.10 to restart")
    server = NatsServer(binary, tmp_path / "store")
    server.start()
    try:
        backend = open_backend(f"{server.url}?bucket=restart&timeout=2")
        run = backend.acquire(req(0, lease=60)).run  # type: ignore[union-attr]
        assert run is not None
        server.stop(kill=True)
        with pytest.raises(BackendUnavailable):
            backend.heartbeat(run.id, run.token, 60)  # type: ignore[union-attr]
        server.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                backend.heartbeat(run.id, run.token, 60)  # type: ignore[union-attr]
                break
            except BackendUnavailable:
                assert time.monotonic() < deadline, "the backend never reconnected"
                time.sleep(0.2)
        assert backend.acquire(req(0, owner="b")).outcome is Outcome.HELD  # type: ignore[union-attr]
        backend.close()
    finally:
        server.stop()


@pytest.mark.nats_kv
@pytest.mark.slow
def test_a_server_back_on_an_older_copy_of_its_store_hands_out_greater_tokens(
    tmp_path: Path,
) -> None:
    """The server's store is copied, more leases follow, the server is killed and comes back on
    the copy: what a power loss before JetStream's fsync does to a single server."""
    binary = find_binary()
    if binary is None:
        pytest.skip("no nats-server binary >= 2.10 to restart")
    server = NatsServer(binary, tmp_path / "store")
    files, copy = server.store_dir / "jetstream", tmp_path / "copy"
    server.start()
    try:
        url = f"{server.url}?bucket=tail&timeout=2"
        with closing(open_backend(url)) as backend:
            kept = backend.acquire(req(0)).run
            assert kept is not None
            backend.finish(kept.id, kept.token, succeeded=True)
        server.stop()  # a clean stop: everything so far is in the files copied next
        shutil.copytree(files, copy)
        server.start()
        with closing(open_backend(url)) as backend:
            lost = [backend.acquire(req(index)).run for index in (1, 2, 3)]
        server.stop(kill=True)
        shutil.rmtree(files)
        shutil.copytree(copy, files)
        server.start()
        with closing(open_backend(url)) as backend:
            assert backend.acquire(req(0, owner="b")).outcome is Outcome.FINISHED
            again = [backend.acquire(req(index, owner="b")).run for index in (1, 2, 3)]
            assert min(r.token for r in again if r) > max(r.token for r in lost if r)
            for old in lost:
                assert old is not None
                with pytest.raises(LeaseLost):
                    backend.finish(old.id, old.token, succeeded=True)
    finally:
        server.stop()


@pytest.mark.nats_kv
def test_deleted_bucket_gives_backend_unavailable(backend: NatsLeaseBackend, nats_url: str) -> None:
    delete_bucket(nats_url.split("?")[0], backend.bucket)
    with pytest.raises(BackendUnavailable, match="was it deleted"):
        backend.acquire(req(0))


# -- what a backend remembers between steps (the key it last wrote, the server's clock) ----------


@pytest.mark.nats_kv
def test_a_remembered_key_another_instance_changed_is_read_again(
    backend: NatsLeaseBackend, nats_url: str
) -> None:
    with closing(open_backend(nats_url)) as other:
        assert isinstance(other, NatsLeaseBackend)
        run = backend.acquire(req(0)).run  # backend remembers the key it wrote
        assert run is not None
        other.finish(run.id, run.token, succeeded=True)
        # A step that writes: its swap on the remembered revision loses, the key is read again.
        with pytest.raises(LeaseLost, match="succeeded"):
            backend.heartbeat(run.id, run.token, 30)
        second = backend.acquire(req(1)).run
        assert second is not None
        other.release(second.id, second.token)
        # A step that would write nothing on the remembered value (held by us) reads it again.
        again = backend.acquire(req(1, owner="b"))
    assert again.outcome is Outcome.WON and again.run is not None
    assert again.run.owner == "b" and again.run.token > second.token


def test_heartbeat_many_on_a_remembered_key_another_instance_changed_judges_the_new_value(
    backend: NatsLeaseBackend, nats_url: str
) -> None:
    with closing(open_backend(nats_url)) as other:
        first, second = backend.acquire(req(0)).run, backend.acquire(req(1)).run
        assert first is not None and second is not None  # backend remembers the job's key
        other.finish(first.id, first.token, succeeded=True)
        # On the remembered value both are held: the swap loses, the key is read again.
        items = [(first.id, first.token), (second.id, second.token)]
        lost, renewed = backend.heartbeat_many(items, 60)
        assert isinstance(lost, LeaseLost) and "succeeded" in str(lost) and renewed is None
        [record] = [r for r in other.runs(JOB) if r.id == second.id]
        assert record.expires_at is not None  # renewed for a minute (it was leased for 30 s)
        assert record.expires_at > other.now() + timedelta(seconds=45)


def test_heartbeat_many_reports_a_name_that_is_no_run_id_for_that_run_alone(
    backend: NatsLeaseBackend,
) -> None:
    run = backend.acquire(req(0)).run
    assert run is not None
    bad, renewed = backend.heartbeat_many([("no run id", 1), (run.id, run.token)], 60)
    with pytest.raises(LeaseLost) as single:
        backend.heartbeat("no run id", 1, 60)
    assert isinstance(bad, LeaseLost) and str(bad) == str(single.value) and renewed is None


def test_the_server_clock_is_read_at_most_once_a_second_and_never_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relay.backends import _nats_clock

    reads: list[int] = []
    monotonic = [100.0]

    async def read() -> int:
        reads.append(1)
        return 5_000 + 1000 * len(reads)

    monkeypatch.setattr(_nats_clock.time, "monotonic", lambda: monotonic[0])
    clock = _nats_clock.ServerClock(read)
    assert asyncio.run(clock.now_ms()) == 6_000
    monotonic[0] += 0.5
    estimate = asyncio.run(clock.now_ms())
    assert len(reads) == 1
    assert 6_000 < estimate <= 6_500  # what elapsed locally, scaled down: a lower bound
    monotonic[0] += _nats_clock.RESYNC
    assert asyncio.run(clock.now_ms()) == 7_000 and len(reads) == 2
    clock.forget()
    assert asyncio.run(clock.now_ms()) == 8_000 and len(reads) == 3
    monotonic[0] -= 10  # a monotonic clock never goes back, but if it did: read again
    assert asyncio.run(clock.now_ms()) == 9_000 and len(reads) == 4
