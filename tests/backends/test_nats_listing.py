"""NATS KV listings (jobs, sweeps, runs, prune, stored schedules): every key, or an error.

nats-py's ``KeyValue.watch()`` could end a listing before its first entry on a loaded machine (its
end marker raced the data), so ``relay jobs`` once saw no job at all. These tests hold
:func:`relay.backends._nats_listing.list_keys` and the backend's listings to "complete or an
error" against the real server: a large bucket under another process's writes, many listings on
a machine kept busy, a server that stops answering.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nats
import nats.js.errors
import pytest
from nats.js.kv import KeyValue

from relay import open_backend
from relay.backends._nats_listing import list_keys, stream_subjects
from relay.backends.nats_kv import NatsLeaseBackend
from relay.errors import BackendUnavailable
from tests.support.nats_server import NatsServer, find_binary
from tests.support.waiting import wait_until

pytestmark = pytest.mark.nats_kv


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    from tests.support.nats_server import nats_kv_lease

    with nats_kv_lease(tmp_path) as url:
        yield url


def _server_and_bucket(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return url.split("?")[0], parse_qs(parts.query)["bucket"][0]


async def _listing(url: str, bucket: str, keys: str = "job.*") -> list[KeyValue.Entry]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        return await list_keys(js, f"KV_{bucket}", f"$KV.{bucket}.", keys, meta_only=False, wait=5)
    finally:
        await nc.close()


def test_a_later_revision_replaces_an_earlier_and_removed_keys_are_left_out(nats_url: str) -> None:
    server, bucket = _server_and_bucket(nats_url)

    async def scenario() -> tuple[list[KeyValue.Entry], list[KeyValue.Entry]]:
        nc = await nats.connect(server)
        try:
            kv = await nc.jetstream().create_key_value(bucket=bucket, history=5)
            empty = await _listing(server, bucket)
            await kv.put("job.a", b"1")
            await kv.put("job.b", b"1")
            await kv.put("job.c", b"1")
            latest = await kv.put("job.a", b"2")
            await kv.delete("job.b")
            await kv.purge("job.c")
            await kv.put("other.d", b"1")  # outside the filter
            assert latest > 0
            return empty, await _listing(server, bucket)
        finally:
            await nc.close()

    empty, listed = asyncio.run(scenario())
    assert empty == []
    assert [(e.key, e.value) for e in listed] == [("job.a", b"2")]


def test_stream_info_lists_every_key_that_holds_a_message(nats_url: str) -> None:
    server, bucket = _server_and_bucket(nats_url)

    async def scenario() -> list[str]:
        nc = await nats.connect(server)
        try:
            kv = await nc.jetstream().create_key_value(bucket=bucket, history=5)
            for i in range(300):
                await kv.put(f"job.k{i}", b"1")
            await kv.put("other.k0", b"1")  # outside the filter
            with pytest.raises(nats.js.errors.NotFoundError):
                await stream_subjects(nc, "KV_no_such_bucket", ">", 5)
            return await stream_subjects(nc, f"KV_{bucket}", f"$KV.{bucket}.job.*", 5)
        finally:
            await nc.close()

    listed = asyncio.run(scenario())
    assert sorted(listed) == sorted(f"$KV.{bucket}.job.k{i}" for i in range(300))


def test_a_large_bucket_is_listed_whole_while_another_process_writes(nats_url: str) -> None:
    backend = open_backend(nats_url)
    assert isinstance(backend, NatsLeaseBackend)
    initial = {f"job-{i}": "every 1m" for i in range(1500)}
    for at in range(0, len(initial), 100):
        backend.register_jobs(dict(list(initial.items())[at : at + 100]))
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, nats_url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        for _ in range(5):
            names = {info.name for info in backend.jobs()}
            assert set(initial) <= names, f"{len(set(initial) - names)} jobs missing"
            assert all(n in initial or n.startswith("new-") for n in names)
            assert len(backend.reclaimable(limit=10)) == 0  # a sweep lists them all too
        assert writer.poll() is None, "the writer stopped before the listings ended"
    finally:
        writer.kill()
        writer.communicate()
        backend.close()


_WRITER = textwrap.dedent(
    """
    import itertools, sys
    from relay import open_backend

    backend = open_backend(sys.argv[1])
    print("writing", flush=True)
    for i in itertools.count():
        # new jobs, and new revisions of the listed ones
        backend.register_jobs({f"new-{i}": "every 1m", f"job-{i % 1500}": f"every {i % 7 + 1}m"})
    """
)


def test_listings_on_a_busy_machine_are_never_short(nats_url: str) -> None:
    server, bucket = _server_and_bucket(nats_url)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]

    async def listings() -> list[int]:
        nc = await nats.connect(server)
        try:
            js = nc.jetstream()
            kv = await js.create_key_value(bucket=bucket, history=5)
            for i in range(50):
                await kv.put(f"job.k{i}", b"x" * 100)
            sizes = []
            for _ in range(100):  # nats-py's watch() came back empty about once in 300 here
                sizes += [
                    len(entries)
                    for entries in await asyncio.gather(
                        *(
                            list_keys(js, f"KV_{bucket}", f"$KV.{bucket}.", "job.*",
                                      meta_only=False, wait=5)
                            for _ in range(8)
                        )
                    )
                ]  # fmt: skip
            return sizes
        finally:
            await nc.close()

    try:
        sizes = asyncio.run(listings())
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert sizes == [50] * len(sizes)


def test_a_listing_the_server_stops_answering_raises(tmp_path: Path) -> None:
    binary = find_binary()
    if binary is None:
        pytest.skip("no nats-server binary >= 2.10 to pause")
    server = NatsServer(binary, tmp_path / "store")
    server.start()
    try:
        backend = open_backend(f"{server.url}?bucket=paused&timeout=0.5")
        assert isinstance(backend, NatsLeaseBackend)
        backend.register_jobs({"a": "every 1m", "b": "every 1m"})
        assert [info.name for info in backend.jobs()] == ["a", "b"]
        assert server.process is not None
        pid = server.process.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: _state(pid) == "T", "the server stops")
            with pytest.raises(BackendUnavailable, match="did not answer"):
                backend.jobs()
            with pytest.raises(BackendUnavailable, match="did not answer"):
                backend.runs()
        finally:
            os.kill(pid, signal.SIGCONT)
        backend.close()
    finally:
        server.stop()


def _state(pid: int) -> str:
    """The process's state letter (``T``: stopped) from ``/proc``."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
