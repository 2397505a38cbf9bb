"""The smallest Relay program: run it in several terminals at once; each run happens once.

python examples/quickstart.py
"""

from __future__ import annotations

import logging
import os

import relay

scheduler = relay.Scheduler("sqlite:///relay.db", lease=30, heartbeat=10)


@scheduler.job(every=5, overlap="skip", max_attempts=3, catch_up=60, stale_after=30)
def refresh(run: relay.Run) -> None:
    """Pretend to refresh a cache; print who ran which run, with its fencing token."""
    print(f"pid {os.getpid()} runs {run.id} (attempt {run.attempt}, token {run.token})")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    scheduler.run()  # SIGTERM / SIGINT stop it and hand unfinished runs over
