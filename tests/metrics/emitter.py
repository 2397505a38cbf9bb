"""A process that counts events into PROMETHEUS_MULTIPROC_DIR, then waits to be killed.

    python -m tests.metrics.emitter JOB TOKEN...

For each token it reports a run of JOB started; the first one also succeeds and is taken over
(so it counts in counters but not in the gauge). Prints "ready" once everything is counted.
"""

from __future__ import annotations

import sys
import time

from relay import metrics
from relay.events import EventBus, RunStarted, RunSucceeded, RunTakenOver
from tests.metrics.events import event


def main() -> None:
    job, *tokens = sys.argv[1:]
    bus = EventBus()
    instrumentation = metrics.instrument(bus)
    for n, token in enumerate(int(t) for t in tokens):
        bus.emit(event(RunStarted, job=job, token=token, start_delay=0.1))
        if n == 0:
            bus.emit(event(RunTakenOver, job=job, token=token))
            bus.emit(event(RunSucceeded, job=job, token=token, duration=1.0))
    instrumentation.flush()
    print("ready", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
