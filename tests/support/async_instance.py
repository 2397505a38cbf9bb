"""An instance served inside an asyncio app: ``python -m tests.support.async_instance JSON``.

As ``tests.support.instance``, but the job is ``async def`` and the scheduler runs in the app's
own event loop (``async with scheduler``), which owns SIGTERM: on it, the app leaves the block.
Each run appends ``(run id, attempt, token, instance name, event)`` lines to the log:
``start``, then ``done`` or ``cancelled``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import relay


def main(args: dict[str, Any]) -> None:
    log = Path(args["log"])
    scheduler = relay.Scheduler(
        args["url"], lease=args["lease"], heartbeat=args["heartbeat"], tick=0.1,
        owner=f"{args['name']}:{os.getpid()}", stop_timeout=args.get("stop_timeout", 1),
    )  # fmt: skip

    def write(run: relay.Run, event: str) -> None:
        with log.open("a") as out:
            out.write(json.dumps([run.id, run.attempt, run.token, args["name"], event]) + "\n")

    @scheduler.job(every=args["every"], name="job")
    async def job(run: relay.Run) -> None:
        write(run, "start")
        try:
            await asyncio.sleep(args["work"])
        except asyncio.CancelledError:
            write(run, "cancelled")
            raise
        write(run, "done")

    async def app() -> None:
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        async with scheduler:
            await stopping.wait()

    asyncio.run(app())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
