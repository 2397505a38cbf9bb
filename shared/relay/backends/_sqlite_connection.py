"""One SQLite connection per backend, shared by its threads and closed whenever the process forks.

SQLite keeps per-process state about the files it has open (POSIX locks, the WAL index), and a
forked child inherits the parent's copy of it, taken at whatever moment the fork happened. A child
forked while another thread of its parent was inside a transaction then fails to open the same
file ("database is locked", "locking protocol"), or hangs on a mutex that thread held: SQLite's
own advice is never to carry an open connection across ``fork()``. Celery forks its pool's
children and an embedded beat (``worker --beat``) from a worker whose heartbeat thread writes to
the store.

So before any fork, every open connection waits for the step in progress and is closed; parent
and child each reopen it at their next step.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable

__all__ = ["SharedConnection"]

_OPEN: weakref.WeakSet[SharedConnection] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


class SharedConnection:
    """A lazily (re)opened ``sqlite3`` connection and the lock its users take around each step.

    ``connect`` opens it (the first time, and again after a fork); hold :attr:`lock` while
    calling :meth:`get` and using what it returns.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self.lock = threading.Lock()
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        # Known to the fork hooks before it opens, and opened under its lock: a fork while
        # another thread opens it (a deferred backend's first use) waits for the open to end.
        with _OPEN_LOCK:
            _OPEN.add(self)
        try:
            with self.lock:
                self._conn = connect()
        except BaseException:
            with _OPEN_LOCK:
                _OPEN.discard(self)
            raise

    def get(self) -> sqlite3.Connection:
        """The open connection, reopened first if a fork closed it (call with :attr:`lock`)."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        """Close the connection for good."""
        with _OPEN_LOCK:
            _OPEN.discard(self)
        with self.lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _close_for_fork(self) -> None:
        self.lock.acquire()  # the step in progress ends first; none starts until after the fork
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_HELD: list[SharedConnection] = []


def _before_fork() -> None:
    _OPEN_LOCK.acquire()
    for shared in list(_OPEN):
        shared._close_for_fork()
        _HELD.append(shared)


def _after_fork() -> None:
    while _HELD:
        _HELD.pop().lock.release()
    _OPEN_LOCK.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
