"""The fault-injecting proxy of tests/support, against a real echo server on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import closing, suppress

import pytest

from tests.support.fault_proxy import FaultProxy, fault_proxy


@pytest.fixture
def echo() -> Iterator[int]:
    """An echo server on a free loopback port: the port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with closing(conn), suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        with suppress(OSError):
            while True:
                conn, _ = server.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def connect(proxy: FaultProxy, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)


def test_pass_forwards_both_ways(echo: int) -> None:
    with fault_proxy("127.0.0.1", echo) as proxy, closing(connect(proxy)) as client:
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"
        assert proxy.accepted == 1


def test_drop_holds_every_byte_without_a_reset_until_the_network_heals(echo: int) -> None:
    with fault_proxy("127.0.0.1", echo) as proxy, closing(connect(proxy)) as client:
        client.sendall(b"a")
        assert client.recv(16) == b"a"
        proxy.set("drop")
        client.sendall(b"b")  # the write succeeds: nothing tells the client
        client.settimeout(0.5)
        with pytest.raises(socket.timeout):
            client.recv(16)
        with closing(connect(proxy)) as late:  # a new connection is accepted, then hears nothing
            late.settimeout(0.5)
            late.sendall(b"c")
            with pytest.raises(socket.timeout):
                late.recv(16)
            proxy.set("pass")
            late.settimeout(5)
            assert late.recv(16) == b"c"
        client.settimeout(5)
        assert client.recv(16) == b"b"  # held, not lost: TCP delivers it once the path is back


def test_reset_resets_open_connections_and_new_ones(echo: int) -> None:
    with fault_proxy("127.0.0.1", echo) as proxy, closing(connect(proxy)) as client:
        client.sendall(b"a")
        assert client.recv(16) == b"a"
        proxy.set("reset")
        with pytest.raises(ConnectionError):
            client.sendall(b"b")
            client.recv(16)
        with pytest.raises(ConnectionError), closing(connect(proxy)) as again:
            again.sendall(b"c")  # (or the connect itself is reset, when the RST comes first)
            again.recv(16)
        proxy.set("pass")
        with closing(connect(proxy)) as healed:
            healed.sendall(b"d")
            assert healed.recv(16) == b"d"


def test_delay_adds_latency_each_way(echo: int) -> None:
    with fault_proxy("127.0.0.1", echo) as proxy, closing(connect(proxy)) as client:
        proxy.set("delay", 0.3)
        began = time.monotonic()
        client.sendall(b"a")
        assert client.recv(16) == b"a"
        assert time.monotonic() - began >= 0.6  # 0.3 s out, 0.3 s back


def test_the_proxy_stops_by_itself_after_its_lifetime(echo: int) -> None:
    proxy = FaultProxy("127.0.0.1", echo, lifetime=0.5)
    with closing(connect(proxy)) as client:
        client.sendall(b"a")
        assert client.recv(16) == b"a"
        deadline = time.monotonic() + 10
        with pytest.raises(OSError):  # reset once the lifetime ends, and no longer listening
            while time.monotonic() < deadline:
                client.sendall(b"b")
                if not client.recv(16):
                    raise ConnectionResetError("closed")
                time.sleep(0.1)
    with pytest.raises(OSError):
        connect(proxy, timeout=1).close()
