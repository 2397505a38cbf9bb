"""A fault-injecting TCP proxy on a free loopback port, in front of a real server.

Clients connect to :attr:`FaultProxy.port` instead of the server's; the test switches the proxy's
mode at run time:

* ``pass``: bytes flow both ways;
* ``drop``: connections stay open but nothing is forwarded either way, as when a network drops
  every packet with no reset. Bytes already read are held, not lost, and flow on (in order) once
  the mode is ``pass`` again, as TCP would deliver them after the partition heals. New
  connections are accepted (the kernel completes the handshake) and then hear nothing;
* ``reset``: every connection is closed with a TCP reset, and new ones are reset at once;
* ``delay``: every chunk waits ``delay`` seconds before it is forwarded.

Threads, not a process: clients are other processes, and the proxy must outlive none of them.
It stops by itself after ``lifetime`` seconds, at the end of :func:`fault_proxy`, or on
:meth:`FaultProxy.close`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FaultProxy", "Mode", "fault_proxy", "proxied"]

Mode = Literal["pass", "drop", "reset", "delay"]
_CHUNK = 65536


class FaultProxy:
    """Forwards ``127.0.0.1:port`` to ``(host, target_port)`` in the mode the test sets."""

    def __init__(self, host: str, target_port: int, *, lifetime: float = 300.0) -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.mode: Mode = "pass"
        self.delay = 0.0
        self._changed = threading.Condition()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self.accepted = 0
        """Connections accepted so far (a test can see that a client connected again)."""
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()
        self._timer = threading.Timer(lifetime, self.close)
        self._timer.daemon = True
        self._timer.start()

    def set(self, mode: Mode, delay: float = 0.0) -> None:
        """Switch mode now; ``reset`` also resets every open connection."""
        with self._changed:
            self.mode, self.delay = mode, delay
            self._changed.notify_all()
            doomed = list(self._sockets) if mode == "reset" else []
        for sock in doomed:
            _reset(sock)

    def close(self) -> None:
        """Stop accepting and close every connection. Idempotent."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            doomed = list(self._sockets)
        self._timer.cancel()
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() and stops listening
        with suppress(OSError):
            self._listener.close()
        for sock in doomed:
            _reset(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "reset":
                _reset(client)
                continue
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        """Connect to the server once the mode lets bytes through, then pump both ways."""
        self._track(client)
        if not self._wait_passable():
            _reset(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        self._track(upstream)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data or not self._wait_passable():
                    break
                if self.mode == "delay" and self.delay > 0:
                    time.sleep(self.delay)
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            self._untrack(sock)
            if self.mode == "reset" or self._closed:
                _reset(sock)
            else:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with suppress(OSError):
                    sock.close()

    def _wait_passable(self) -> bool:
        """Hold while the mode is ``drop``; ``False`` once the proxy resets or closes."""
        with self._changed:
            while self.mode == "drop" and not self._closed:
                self._changed.wait(0.5)
            return self.mode != "reset" and not self._closed

    def _track(self, sock: socket.socket) -> None:
        with self._changed:
            self._sockets.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._changed:
            self._sockets.discard(sock)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a FIN, waking a thread blocked reading it."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # sends nothing; a blocked recv() returns b""
    with suppress(OSError):
        sock.close()


@contextmanager
def fault_proxy(host: str, port: int, *, lifetime: float = 300.0) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of ``host:port``, closed when the block ends."""
    proxy = FaultProxy(host, port, lifetime=lifetime)
    try:
        yield proxy
    finally:
        proxy.close()


@contextmanager
def proxied(url: str, *, lifetime: float = 300.0) -> Iterator[tuple[FaultProxy, str]]:
    """A proxy in front of the one server a backend URL names, and the URL through it."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    with fault_proxy(parts.hostname, parts.port, lifetime=lifetime) as proxy:
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
        yield proxy, urlunsplit(parts._replace(netloc=netloc))
