"""A standalone scheduler that beats: ``python -m tests.support.health_instance URL OWNER``.

Until the engine's loop calls the reporter itself, this instance calls
:meth:`relay.health.InstanceHeartbeat.maybe_record` from a thread of its own every 50 ms, with a
beat interval of 0.5 s. It prints ``ready`` once its first beat is recorded, then runs until killed.
"""

from __future__ import annotations

import sys
import threading
import time

import relay
from relay.health import InstanceHeartbeat


def main(url: str, owner: str) -> None:
    scheduler = relay.Scheduler(url, lease=5, tick=0.1, owner=owner)

    @scheduler.job(every=1, name="tick")
    def tick(run: relay.Run) -> None:
        pass

    beat = InstanceHeartbeat(scheduler.backend, owner, "scheduler", interval=0.5, ttl=60)

    def beating() -> None:
        while True:
            beat.maybe_record()
            time.sleep(0.05)

    assert beat.record(), "the first heartbeat was not recorded"
    print("ready", flush=True)
    threading.Thread(target=beating, daemon=True).start()
    scheduler.run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
