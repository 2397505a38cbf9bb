"""Forks with events queued, as a Celery prefork parent would: ``python -m tests.metrics.forker``.

The parent queues a run start, forks, and only then counts it; the child starts its own run and
counts it. The parent's start must be counted once (by the parent), not again by the child.
"""

from __future__ import annotations

import os

from relay import metrics
from relay.events import EventBus, RunStarted
from tests.metrics.events import event


def main() -> None:
    bus = EventBus()
    instrumentation = metrics.instrument(bus)
    bus.emit(event(RunStarted, job="parent", token=1))
    pid = os.fork()
    if pid == 0:
        bus.emit(event(RunStarted, job="child", token=2))
        instrumentation.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    instrumentation.flush()
    print(os.getpid(), pid, flush=True)


if __name__ == "__main__":
    main()
