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
from contextlib import suppress

__all__ = ["Watch", "Watchdog"]


class Watch:
    """One connection being watched, while its ``with`` block runs; :attr:`cut` says whether its
    deadline cut it."""

    __slots__ = ("cut", "deadline", "fd", "watchdog")

    def __init__(self, watchdog: Watchdog, fd: int, deadline: float) -> None:
        self.watchdog, self.fd, self.deadline, self.cut = watchdog, fd, deadline, False

    def __enter__(self) -> Watch:
        self.watchdog._add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.watchdog._discard(self)


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

    def watch(self, fd: int, extra: float = 0.0) -> Watch:
        """Watch the socket ``fd`` while a ``with`` block runs, for ``timeout`` + ``extra``
        seconds. (A class, not a generator: it runs around every statement.)"""
        return Watch(self, fd, time.monotonic() + self.timeout + extra)

    def _add(self, entry: Watch) -> None:
        with self._lock:
            self._watched.add(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _discard(self, entry: Watch) -> None:
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
