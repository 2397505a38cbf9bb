"""The finish limit reaches Celery's prefork children: a worker stopping warm while a child retries
an unrecorded finish stops within the lease (as a Dramatiq worker does), reporting it abandoned.

Beat reaches the store directly; the worker through a fault proxy that the test closes while the
task runs, so its finish cannot be recorded.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.celery_integration.cluster import cluster
from tests.celery_integration.test_celery_processes import one_run_now, redis_broker
from tests.support.backends import LEASE_BACKENDS
from tests.support.event_log import read_events
from tests.support.fault_proxy import proxied

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def test_a_prefork_worker_stops_within_the_lease_when_its_finish_goes_unanswered(
    tmp_path: Path,
) -> None:
    factory, _ = LEASE_BACKENDS["redis"]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        schedule = {"long": {**one_run_now(), "kwargs": {"sleep": 2}}}
        with cluster(tmp_path, redis_broker(), url, schedule) as c:
            c.set(lease=3, heartbeat=0.5, queue_lease=10)
            c.env["RELAY_T_BACKEND"] = f"{near}&timeout=0.5"
            worker = c.worker(pool="prefork", concurrency=1)
            c.env["RELAY_T_BACKEND"] = url
            beat = c.beat()
            c.wait_for("the run to start", lambda: c.events("start") != [])
            proxy.set("reset")  # the worker's store is gone: its finish goes unanswered
            c.wait_for("the task to end", lambda: c.events("end") != [])
            c.kill(beat, signal.SIGKILL)
            # A warm shutdown, sent to the main process only (as a container runtime does): it
            # waits for the running task. Before, it waited for ever on the child retrying its
            # finish; a cold one terminates the children (the run is then taken over).
            worker.send_signal(signal.SIGTERM)
            code = c.exit_code(worker, timeout=60)
            abandoned = read_events(c.relay_events, "abandoned")
            logs = c.logs(tail=None)
    assert code == 0, logs
    # The child lived on, gave the finish up within the lease, and said so.
    assert [e["relay_operation"] for e in abandoned] == ["finish"], logs
