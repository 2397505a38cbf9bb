"""Real ``celery beat`` and ``celery worker`` processes with RelayScheduler: each run happens once.

Every test starts its own processes on its own broker queue and Relay store; the task appends a
``start`` and an ``end`` event per run to a file, keyed by run id.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from relay.backends import open_backend
from relay.contract import is_lease
from relay.runs import RunState, parse_run_id
from tests.celery_integration.cluster import cluster
from tests.support import services
from tests.support.backends import CLAIM_BACKENDS, LEASE_BACKENDS, params
from tests.support.fault_proxy import proxied
from tests.support.slots import one_slot_behind

pytestmark = [pytest.mark.slow, pytest.mark.redis]

UTC = timezone.utc


CLAIM = {"sqlite-claim": CLAIM_BACKENDS["sqlite-claim"]}


@pytest.fixture(params=[*params(LEASE_BACKENDS), *params(CLAIM)])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh Relay store: every lease backend, and the SQLite claim backend."""
    registry = CLAIM_BACKENDS if request.param in CLAIM_BACKENDS else LEASE_BACKENDS
    factory, _ = registry[request.param]
    with factory(tmp_path) as url:
        yield url


def redis_broker() -> str:
    return services.require("redis")


def slots(events: list[dict[str, Any]]) -> list[datetime]:
    return sorted(parse_run_id(e["run"])[1] for e in events)


def assert_every_second_once(events: list[dict[str, Any]]) -> None:
    """Each run ended once, and the slots from the first to the last miss none."""
    ends = Counter(e["run"] for e in events if e["event"] == "end")
    starts = Counter(e["run"] for e in events if e["event"] == "start")
    assert [run for run, n in starts.items() if n > 1] == [], "a run started twice"
    assert [run for run, n in ends.items() if n > 1] == [], "a run ran twice"
    done = slots([e for e in events if e["event"] == "end"])
    expected = [done[0] + timedelta(seconds=i) for i in range(len(done))]
    assert done == expected, "a slot is missing"


TOLERATE_STALLS = {"catch_up": 3}
"""Without catch-up, a slot that passed while every beat was stalled (a loaded CI machine) is
skipped as missed, by design; a few seconds of catch-up keep the every-second tests exact."""


def test_three_beats_two_workers_publish_each_slot_once_even_when_a_beat_is_killed(
    tmp_path: Path, backend_url: str
) -> None:
    lease = "claim" not in backend_url
    schedule = {"tick": {"every": 1, "relay": TOLERATE_STALLS} if lease else {"every": 1}}
    with cluster(tmp_path, redis_broker(), backend_url, schedule) as c:
        if lease:
            # A beat killed between winning and publishing leaves a run for the others to redo.
            c.set(lease=3, heartbeat=1, queue_lease=5)
        beats = [c.beat() for _ in range(3)]
        c.worker(pool="prefork", concurrency=1)
        c.worker(pool="prefork", concurrency=1)
        c.wait_for("the first runs", lambda: len(c.events("end")) >= 3)
        # Right after a publication, so that a claim backend's runs (lost if their winner dies
        # before publishing, by design) are not at stake.
        seen = len(c.events("start"))
        c.wait_for("a publication", lambda: len(c.events("start")) > seen)
        c.kill(beats[0])
        killed_at = time.time()
        c.wait_for("5 more runs", lambda: max(e["at"] for e in c.events("end")) > killed_at + 5)
        for beat in beats[1:]:
            c.kill(beat)
        c.wait_quiet()
        events = c.events()
    assert len(slots(events)) >= 16  # start and end of at least 8 runs
    assert_every_second_once(events)


@pytest.mark.rabbitmq
def test_rabbitmq_broker(tmp_path: Path) -> None:
    broker = services.require("rabbitmq")
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with cluster(tmp_path, broker, url, {"tick": {"every": 1, "relay": TOLERATE_STALLS}}) as c:
        beats = [c.beat() for _ in range(3)]
        c.worker(pool="threads", concurrency=2)
        c.worker(pool="threads", concurrency=2)
        c.wait_for("6 runs", lambda: len(c.events("end")) >= 6, timeout=90)
        for beat in beats:
            c.kill(beat)
        c.wait_quiet()
        assert_every_second_once(c.events())


def one_run_now(**options: Any) -> dict[str, Any]:
    """An entry with exactly one due run (:func:`tests.support.slots.one_slot_behind`)."""
    slot = one_slot_behind()
    return {"cron": slot["cron"], "relay": {"catch_up": slot["catch_up"], **options}}


def test_a_worker_killed_mid_task_loses_the_run_which_completes_once_elsewhere(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {**one_run_now(), "kwargs": {"sleep_first": 30}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.set(lease=3, heartbeat=1, queue_lease=10)
        c.beat()
        first = c.worker(pool="solo")
        c.wait_for("the first attempt to start", lambda: c.events("start") != [])
        started = c.events("start")[0]
        assert started["pid"] == first.pid and started["attempt"] == 1
        c.worker(pool="solo")
        c.kill(first)
        c.wait_for("a second attempt to end", lambda: c.events("end") != [], timeout=60)
        c.wait_quiet()
        # Late duplicates of both attempts' messages are dropped, not run.
        final = c.events("end")[0]
        for event in (started, final):
            c.publish({"id": event["run"], "token": event["token"], "attempt": 1, "owner": "x"})
        c.wait_for("two drops", lambda: c.logs(tail=None).count("refused the start of") == 2)
        events = c.events()
    ends = [e for e in events if e["event"] == "end"]
    assert len(ends) == 1
    assert ends[0]["run"] == started["run"]
    assert ends[0]["attempt"] == 2 and ends[0]["token"] > started["token"]
    backend = open_backend(url)
    assert is_lease(backend)
    (record,) = backend.runs("long")
    assert record.state is RunState.SUCCEEDED and record.attempt == 2
    backend.close()


def store(url: str) -> Any:
    backend = open_backend(url)
    assert is_lease(backend)
    return backend


def test_a_failed_run_is_retried_by_a_beat_sweep(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"flaky": {**one_run_now(max_attempts=3), "kwargs": {"fail_first": True}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.set(lease=3, heartbeat=1)
        c.beat()
        c.worker()
        c.wait_for("the retry to end", lambda: c.events("end") != [])
        c.wait_quiet()
        events = c.events()
    assert [(e["event"], e["attempt"]) for e in events] == [
        ("start", 1),
        ("start", 2),
        ("end", 2),
    ]
    backend = store(url)
    (record,) = backend.runs("flaky")
    assert record.state is RunState.SUCCEEDED and record.failures == 1
    backend.close()


def test_overlap_skip_never_runs_two_runs_of_a_long_task_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {"every": 1, "kwargs": {"sleep": 1.6}, "relay": {"overlap": "skip"}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.beat()
        c.beat()
        c.worker(concurrency=4)
        c.wait_for("3 runs", lambda: len(c.events("end")) >= 3)
        for process in c.processes[:2]:
            c.kill(process)
        c.wait_quiet(seconds=3)
        events = c.events()
    spans = sorted(
        (start["at"], end["at"])
        for start in events
        if start["event"] == "start"
        for end in events
        if end["event"] == "end" and end["run"] == start["run"]
    )
    assert len(spans) >= 3
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert next_start >= end, "two runs of an overlap=skip job ran at once"
    backend = store(url)
    reasons = Counter(
        r.reason for r in backend.runs("long", limit=100) if r.state is RunState.SKIPPED
    )
    backend.close()
    assert reasons["overlap"] >= 3


def test_catch_up_runs_the_slots_missed_while_every_beat_was_down(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"tick": {"every": 1, "relay": TOLERATE_STALLS}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.set(lease=3, heartbeat=1, queue_lease=5)
        beat = c.beat()
        c.worker(concurrency=4)
        c.wait_for("2 runs", lambda: len(c.events("end")) >= 2)
        seen = len(c.events("start"))
        c.wait_for("a publication", lambda: len(c.events("start")) > seen)
        c.kill(beat)
        down_at = time.time()
        time.sleep(7)  # longer than TOLERATE_STALLS: only the new beat's catch_up covers it
        # The beat that comes back catches up what nobody decided meanwhile.
        c.env["RELAY_T_SCHEDULE"] = json.dumps({"tick": {"every": 1, "relay": {"catch_up": 60}}})
        c.beat()
        c.wait_for(
            "runs after the downtime",
            lambda: any(e["at"] > down_at + 9 for e in c.events("start")),
        )
        c.kill(c.processes[-1])
        c.wait_quiet()
        events = c.events()
    assert_every_second_once(events)
    done = slots([e for e in events if e["event"] == "end"])
    missed = [s for s in done if down_at + 1 < s.timestamp() < down_at + 4]
    assert len(missed) >= 2, "the oldest slots of the downtime were run"


def test_a_worker_with_an_embedded_beat_runs_every_slot_once_on_sqlite(tmp_path: Path) -> None:
    # `celery worker --beat` (the Celery example's command) forks its beat from the worker's main
    # process while the worker's heartbeat thread writes to the store: the beat could not open
    # the SQLite file ("locking protocol") until connections were closed across forks.
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with cluster(
        tmp_path, redis_broker(), url, {"tick": {"every": 1, "relay": TOLERATE_STALLS}}
    ) as c:
        c.worker(pool="prefork", concurrency=2, beat=True)
        c.wait_for("5 runs", lambda: len(c.events("end")) >= 5)
        logs = c.logs(tail=None)
        events = c.events()
    assert "BackendUnavailable" not in logs and "Traceback" not in logs, logs
    assert_every_second_once(events)


def test_heartbeats_keep_a_long_task_and_a_warm_shutdown_lets_it_finish(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {**one_run_now(), "kwargs": {"sleep": 9}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        # The task outlives its lease twice over: only heartbeats keep beats from taking it over
        # (a lease seconds longer than the heartbeat: a loaded machine delays beats that much).
        c.set(lease=4, heartbeat=0.5, queue_lease=10)
        c.beat()
        worker = c.worker(pool="solo")
        c.wait_for("the run to start", lambda: c.events("start") != [])
        c.kill(worker, signal.SIGTERM)
        assert worker.wait(30) == 0
        c.worker()
        time.sleep(5)  # more than the lease: a lost run would be taken over by now
        events = c.events()
    assert [(e["event"], e["attempt"]) for e in events] == [("start", 1), ("end", 1)]
    backend = store(url)
    (record,) = backend.runs("long")
    assert record.state is RunState.SUCCEEDED
    backend.close()


def test_a_cold_shutdown_hands_the_run_over_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {**one_run_now(), "kwargs": {"sleep_first": 60}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.set(lease=60, heartbeat=1, queue_lease=60)
        c.beat()
        worker = c.worker(pool="solo")
        c.wait_for("the run to start", lambda: c.events("start") != [])
        c.worker()
        c.kill(worker, signal.SIGQUIT)
        # Well before the 60 s lease could expire: only a hand-over lets another worker in.
        c.wait_for("the run to end elsewhere", lambda: c.events("end") != [], timeout=20)
        events = c.events()
    assert [(e["event"], e["attempt"]) for e in events] == [("start", 1), ("start", 2), ("end", 2)]
    assert events[0]["pid"] == worker.pid != events[2]["pid"]
    backend = store(url)
    (record,) = backend.runs("long")
    assert record.state is RunState.SUCCEEDED and record.failures == 0
    backend.close()


def test_bad_settings_stop_beat_and_worker_at_start_naming_the_setting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with cluster(tmp_path, redis_broker(), url, {"tick": {"every": 1}}) as c:
        c.set(lease=10, heartbeat=20)
        beat, worker = c.beat(), c.worker()
        assert beat.wait(60) != 0 and worker.wait(60) != 0
    for log in ("beat0.log", "worker1.log"):  # both processes, each naming the setting
        text = (tmp_path / log).read_text(errors="replace")
        assert "heartbeat (20s) must be shorter than lease (10s)" in text, text[-4000:]
    assert c.events() == []


def test_a_duplicate_delivered_to_another_thread_of_the_same_worker_is_dropped(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    schedule = {"long": {**one_run_now(), "kwargs": {"sleep": 3}}}
    with cluster(tmp_path, redis_broker(), url, schedule) as c:
        c.beat()
        c.worker(pool="threads", concurrency=2)
        c.wait_for("the run to start", lambda: c.events("start") != [])
        (started,) = c.events("start")
        c.publish({"id": started["run"], "token": started["token"], "attempt": 1, "owner": "x"})
        c.wait_for(
            "the duplicate to be dropped", lambda: "refused the start of" in c.logs(tail=None)
        )
        c.wait_for("the run to end", lambda: c.events("end") != [])
        events = c.events()
    assert [e["event"] for e in events] == ["start", "end"]


def test_a_triggered_run_is_published_once_by_racing_beats(tmp_path: Path) -> None:
    from relay import Control

    url = f"sqlite:///{tmp_path / 'relay.db'}"
    with cluster(tmp_path, redis_broker(), url, {"hourly": {"every": 3600}}) as c:
        c.set(lease=3, heartbeat=1)
        for _ in range(3):
            c.beat()
        c.worker()

        def registered() -> bool:
            with Control(url) as control:
                return [job.name for job in control.jobs()] == ["hourly"]

        c.wait_for("the entry to be registered", registered)
        with Control(url) as control:
            run_id = control.trigger("hourly").id
        c.wait_for("the manual run to end", lambda: run_id in {e["run"] for e in c.events("end")})
        c.wait_quiet()
        starts = Counter(e["run"] for e in c.events("start"))
    assert starts[run_id] == 1, starts
    backend = store(url)
    (record,) = [r for r in backend.runs("hourly") if r.id == run_id]
    assert record.state is RunState.SUCCEEDED
    backend.close()


def test_a_worker_cut_off_from_its_store_hands_back_the_runs_it_could_not_start(
    tmp_path: Path,
) -> None:
    # Beat reaches the store, the worker through a proxy that drops every packet for a while:
    # each start in that time goes unanswered, and nothing runs it. Once the proxy heals, the
    # worker hands those runs back and beat's next sweep publishes them again: every slot runs
    # once, long before the 120 s queue lease each was left with could run out.
    factory, _ = LEASE_BACKENDS["redis"]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        schedule = {"tick": {"every": 1, "relay": TOLERATE_STALLS}}
        with cluster(tmp_path, redis_broker(), url, schedule) as c:
            c.set(lease=10, heartbeat=2, queue_lease=120)
            c.env["RELAY_T_BACKEND"] = f"{near}&timeout=0.5"
            c.worker(pool="solo")
            c.env["RELAY_T_BACKEND"] = url
            beat = c.beat()
            c.wait_for("the first runs", lambda: len(c.events("end")) >= 2)
            proxy.set("drop")
            c.wait_for(
                "starts that went unanswered",
                lambda: c.logs(tail=None).count("could not start") >= 3,
                timeout=30,
            )
            proxy.set("pass")
            healed = datetime.now(UTC)

            def caught_up() -> bool:
                done = sorted(set(slots(c.events("end"))))
                return done[-1] > healed and len(done) == (done[-1] - done[0]).total_seconds() + 1

            c.wait_for("every slot of the outage to run", caught_up, timeout=30)
            c.kill(beat)
            c.wait_quiet()
            events = c.events()
            logs = c.logs(tail=None)
    assert_every_second_once(events)
    assert "dropping this message (the run is handed back once the store answers)" in logs
    assert "handed back now that the store answers" in logs
