"""A deadline on each PostgreSQL statement, kept on this side of the network.

``statement_timeout`` is the server's: it cannot end a statement whose packets never reach the
server, or whose answer never comes back, and psycopg waits for an answer for ever. So the
PostgreSQL backend watches each pooled connection while it is in use: past the deadline its
socket is shut down, the waiting call fails at once with an ``OperationalError`` (which the
backend raises as ``BackendUnavailable``), and the pool discards the broken connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

__all__ = ["Watch", "Watchdog"]


class Watch:
    """One connection being watched; :attr:`cut` says whether its deadline cut it."""

    __slots__ = ("cut", "deadline", "fd")

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd, self.deadline, self.cut = fd, deadline, False


class Watchdog:
    """Shuts down the socket of any watched connection still in use ``timeout`` seconds on.

    One daemon thread per backend, started at the first watch; it looks every quarter of the
    timeout, so a statement is cut between ``timeout`` and ``1.25 * timeout`` after it began.
    """

    def __init__(self, timeout: float, name: str = "relay-pg-watchdog") -> None:
        self.timeout = timeout
        self._name = name
        self._lock = threading.Lock()
        self._watched: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    @contextmanager
    def watch(self, fd: int, extra: float = 0.0) -> Iterator[Watch]:
        """Watch the socket ``fd`` while the block runs, for ``timeout`` + ``extra`` seconds."""
        entry = Watch(fd, time.monotonic() + self.timeout + extra)
        with self._lock:
            self._watched.add(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        try:
            yield entry
        finally:
            with self._lock:  # never cut after this: the descriptor may be reused
                self._watched.discard(entry)

    def close(self) -> None:
        """Stop the thread (idempotent)."""
        self._closed.set()

    def _run(self) -> None:
        while not self._closed.wait(self.timeout / 4):
            now = time.monotonic()
            with self._lock:
                for entry in self._watched:
                    if entry.deadline <= now and not entry.cut:
                        entry.cut = True
                        _shut_down(entry.fd)


def _shut_down(fd: int) -> None:
    """End the connection on ``fd``: a blocked read returns at once (``fd`` stays open)."""
    with suppress(OSError):
        duplicate = socket.socket(fileno=socket.dup(fd))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()
