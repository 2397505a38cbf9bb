"""One instance's check of the jobs' expectations: ``python -m tests.support.watch_once JSON``.

Opens the store at ``url``, waits until ``start_at`` (wall time, so that several processes check
at once), checks the job ``job`` once with :class:`relay.engine.watching.Watch` and prints the
types of the events it announced, as a JSON list.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from relay import open_backend
from relay.contract import LeaseBackend
from relay.engine.watching import Watch
from relay.events import Event, EventBus


def main(args: dict[str, Any]) -> None:
    backend = open_backend(args["url"])
    assert isinstance(backend, LeaseBackend)
    events = EventBus()
    seen: list[str] = []
    events.on(Event, lambda e: seen.append(e.type))
    watch = Watch(backend, lambda: [args["job"]], events, args["name"])
    time.sleep(max(0.0, args["start_at"] - time.time()))
    watch.check()
    backend.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
