"""A plain asyncio app serving a scheduler: ``python -m tests.support.serve_instance JSON``.

``asyncio.run(main())`` where ``main`` only awaits ``scheduler.serve()``: the app installs no
signal handler of its own, so ``serve()`` takes SIGTERM and SIGINT. One job, with the options
given (``one_slot_behind``: one run due now), awaits ``work`` seconds; each run appends ``[run id,
attempt, event]`` lines to the log: ``start``, then ``done`` or ``cancelled``. It prints
``serving`` once the loop runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import relay


def main(args: dict[str, Any]) -> None:
    log = Path(args["log"])
    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=1, tick=0.1,
        owner=f"{args['name']}:{os.getpid()}", stop_timeout=args["stop_timeout"],
    )  # fmt: skip

    def write(run: relay.Run, event: str) -> None:
        with log.open("a") as out:
            out.write(json.dumps([run.id, run.attempt, event]) + "\n")

    @scheduler.job(name="job", **args["job"])
    async def job(run: relay.Run) -> None:
        write(run, "start")
        try:
            await asyncio.sleep(args["work"])
        except asyncio.CancelledError:
            write(run, "cancelled")
            raise
        write(run, "done")

    async def app() -> None:
        print("serving", flush=True)
        await scheduler.serve()

    asyncio.run(app())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
