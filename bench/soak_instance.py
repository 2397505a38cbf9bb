"""One standalone scheduler for the soak benchmark: ``python -m bench.soak_instance JSON``.

A job every 0.1 s (it does nothing) and ``idle`` jobs due once a day, on the given store, ticking
every 0.05 s until SIGTERM. ``retention`` (seconds) is passed to the scheduler when given and the
scheduler accepts it (branch ``control``).
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

import relay


def main(args: dict[str, Any]) -> None:
    """Run until stopped."""
    options: dict[str, Any] = {"tick": 0.05, "lease": 5}
    if args.get("retention") and "retention" in inspect.signature(relay.Scheduler).parameters:
        options["retention"] = args["retention"]
    scheduler = relay.Scheduler(args["url"], **options)

    @scheduler.job(every=0.1, name="busy")
    def busy(run: relay.Run) -> None:
        pass

    for i in range(args["idle"]):
        scheduler.job(every=86400, name=f"idle-{i:05d}")(lambda run: None)
    print("retention" in options, flush=True)
    scheduler.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
