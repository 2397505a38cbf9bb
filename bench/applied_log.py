"""What the scheduler processes of ``bench_host_schedules`` log: each stored-schedule change they
apply, as a ``[version, time.time()]`` line in ``RELAY_B_LOG`` (read by ``bench_schedules._seen``).
"""

from __future__ import annotations

import json
import os
import time

from relay.events import ScheduleApplied


def log_applied(event: ScheduleApplied) -> None:
    """Append ``[event.version, time.time()]`` to ``RELAY_B_LOG``; O_APPEND keeps lines whole."""
    fd = os.open(os.environ["RELAY_B_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps([event.version, time.time()]) + "\n").encode())
    finally:
        os.close(fd)
