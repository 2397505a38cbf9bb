"""NATS KV leases on a three-node cluster (``replicas=3``): any server SIGKILLed, the leader too.

Each test starts its own cluster (tests/support/nats_cluster.py) and kills it at the end. When the
server leading the bucket's stream dies, the others elect a new leader after nats-server's Raft
election timeout (4 to 9 s, not configurable): steps wait it out, and none fails or is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from relay import AcquireRequest, Outcome, open_backend
from relay.backends.nats_kv import NatsLeaseBackend
from relay.errors import BackendUnavailable, ConfigurationError
from relay.runs import parse_run_id
from tests.support.nats_cluster import NatsCluster, NatsNode, nats_cluster
from tests.support.procs import ROOT, stop_all

pytestmark = [pytest.mark.nats_kv, pytest.mark.slow]

UTC = timezone.utc
ELECTION_BOUND = 20.0
"""Seconds from a leader's SIGKILL to the next step answered: the election (at most 9 s after
the last heartbeat, then a campaign) plus one attempt (1 s), with room for a loaded machine."""
FOLLOWER_BOUND = 8.0
"""Seconds from a follower's SIGKILL to the next run started: a job every second, a reconnect."""


def slot(index: int) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=index)


def follower(cluster: NatsCluster, stream: str) -> NatsNode:
    leader = cluster.leader(stream)
    return next(node for node in cluster.nodes if node is not leader)


# -- one backend, in this process ---------------------------------------------------------------


def test_steps_wait_out_the_election_after_the_leader_is_killed() -> None:
    """With timeout=5 a call may wait 15 s: long enough for an election (4 to 9 s)."""
    with nats_cluster() as cluster:
        backend = open_backend(f"{cluster.url}?bucket=steps&replicas=3&timeout=5")
        assert isinstance(backend, NatsLeaseBackend)
        try:
            cluster.current("KV_steps")
            longest, errors, stop = [0.0], [], threading.Event()
            since_slow = [0]  # steps ended since (and with) the first one longer than 3 s

            def steps() -> None:
                index = 0
                while not stop.is_set():
                    index += 1
                    began = time.monotonic()
                    try:
                        request = AcquireRequest("job", slot(index), "me", lease=30)
                        run = backend.acquire(request).run
                        assert run is not None
                        backend.finish(run.id, run.token, succeeded=True)
                    except Exception as exc:  # every step must go through
                        errors.append(exc)
                    longest[0] = max(longest[0], time.monotonic() - began)
                    since_slow[0] += longest[0] > 3

            worker = threading.Thread(target=steps)
            worker.start()
            time.sleep(1)
            cluster.leader("KV_steps").kill()
            # Until a step waited the election out and the next ones go through again.
            wait_for(lambda: since_slow[0] >= 5 or bool(errors), ELECTION_BOUND, "the election")
            stop.set()
            worker.join(60)
            assert errors == []
            assert 3 < longest[0] < ELECTION_BOUND  # the election was waited out, not skipped
            acquired = backend.acquire(AcquireRequest("job", slot(0), "late", lease=30))
            assert acquired.outcome is Outcome.WON  # slot 0 was never run: the store answers
        finally:
            backend.close()


def test_a_sweep_does_not_wait_for_a_new_meta_leader() -> None:
    """The meta leader (which creates consumers) killed: sweeps read through the stream leader."""
    with nats_cluster() as cluster:
        backend = open_backend(f"{cluster.url}?bucket=sweep&replicas=3")
        assert isinstance(backend, NatsLeaseBackend)
        try:
            cluster.current("KV_sweep")
            expired = backend.acquire(AcquireRequest("job", slot(1), "gone", lease=0.5)).run
            assert expired is not None
            meta = cluster.meta_leader()
            if meta is cluster.leader("KV_sweep"):  # keep the stream's leader alive
                cluster.request("$JS.API.STREAM.LEADER.STEPDOWN.KV_sweep")
                wait_for(lambda: cluster.leader("KV_sweep") is not meta, 30, "another leader")
            time.sleep(0.6)
            meta.kill()
            for _ in range(3):
                began = time.monotonic()
                assert [r.id for r in backend.reclaimable()] == [expired.id]
                assert time.monotonic() - began < 5  # one attempt at a consumer (1 s), not 4-9 s
        finally:
            backend.close()


def test_dedup_claims_wait_out_the_election_and_no_run_is_won_twice() -> None:
    with nats_cluster() as cluster:
        url = f"{cluster.url}?strategy=dedup&stream=CLAIMS&replicas=3&timeout=15"
        backends = [open_backend(url) for _ in range(2)]
        wins: list[list[int]] = [[], []]
        errors: list[Exception] = []
        try:
            cluster.current("CLAIMS")

            def claim(which: int) -> None:
                for index in range(150):
                    try:
                        if backends[which].claim("job", slot(index)):  # type: ignore[union-attr]
                            wins[which].append(index)
                    except Exception as exc:
                        errors.append(exc)
                    time.sleep(0.05)

            workers = [threading.Thread(target=claim, args=(n,)) for n in range(2)]
            for worker in workers:
                worker.start()
            time.sleep(1)
            cluster.leader("CLAIMS").kill()
            for worker in workers:
                worker.join(120)
        finally:
            for backend in backends:
                backend.close()
        # A message the dying leader took and never answered may have been stored: it is not
        # sent again (it would come back a duplicate), and its claim says the store did not
        # answer. One in flight per backend at the kill, at most.
        assert len(errors) <= 2 and all("did not answer" in str(e) for e in errors), errors
        assert set(wins[0]) & set(wins[1]) == set()
        assert len(wins[0]) + len(wins[1]) >= 150 - 2 * len(errors)


def test_a_dead_server_in_the_url_does_not_keep_instances_from_opening_the_bucket() -> None:
    with nats_cluster() as cluster:
        url = f"{cluster.url}?bucket=opening&replicas=3"
        open_backend(url).close()
        cluster.current("KV_opening")
        # A server that leads nothing: a leader's death adds an election (4-9 s, tested apart),
        # which would outlast opening's deadline; here the client must only move past it.
        leaders = {cluster.meta_leader().name, cluster.leader("KV_opening").name}
        next(node for node in cluster.nodes if node.name not in leaders).kill()
        for index in range(3):  # the client tries the servers in random order
            backend = open_backend(url)
            try:
                won = backend.acquire(AcquireRequest("job", slot(index), "me", lease=30))  # type: ignore[union-attr]
                assert won.outcome is Outcome.WON
            finally:
                backend.close()


def test_an_instance_beat_does_not_wait_out_an_election() -> None:
    """The scheduler's loop records its beat between ticks: one attempt, then on (logged)."""
    from relay.health import InstanceInfo

    with nats_cluster() as cluster:
        backend = open_backend(f"{cluster.url}?bucket=beats&replicas=3")
        assert isinstance(backend, NatsLeaseBackend)
        info = InstanceInfo("me", "scheduler", "host", 1, datetime.now(UTC), "1", 10.0)
        try:
            backend.record_instance(info, 30)
            stream = "KV_beats-instances"
            cluster.current(stream)
            if cluster.leader(stream) is cluster.leader("KV_beats"):  # keep the leases' leader
                cluster.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}")
                wait_for(lambda: cluster.leader(stream) is not cluster.leader("KV_beats"), 30, "")
            cluster.leader(stream).kill()
            for _ in range(3):
                began = time.monotonic()
                with contextlib.suppress(BackendUnavailable):
                    backend.record_instance(info, 30)
                assert time.monotonic() - began < 3  # an attempt (1 s), not an election (4-9 s)
        finally:
            backend.close()


def test_the_bucket_serves_no_direct_get_and_keeps_its_replicas() -> None:
    with nats_cluster() as cluster:
        open_backend(f"{cluster.url}?bucket=conf&replicas=3").close()
        info = cluster.stream_info("KV_conf") or {}
        assert info["config"]["num_replicas"] == 3
        assert info["config"].get("allow_direct", False) is False
        with pytest.raises(ConfigurationError, match=r"has 3 replica.*replicas=3"):
            open_backend(f"{cluster.url}?bucket=conf&replicas=1")


def test_replicas_a_single_server_cannot_keep_are_refused_naming_the_fix(tmp_path: Path) -> None:
    from tests.support.nats_server import nats_kv_lease

    with nats_kv_lease(tmp_path) as url, pytest.raises(ConfigurationError, match="replicas=1"):
        open_backend(f"{url}&replicas=3")


def test_a_swap_whose_answer_was_lost_counts_as_written(tmp_path: Path) -> None:
    """The first attempt of an acquire's swap lands but its answer comes after the attempt gave
    up (a proxy delays every byte 2 s): the next attempt finds the key moved on, to the very
    value it wrote, so the acquire is won (not "held", by itself)."""
    from tests.support.fault_proxy import proxied
    from tests.support.nats_server import nats_kv_lease

    with nats_kv_lease(tmp_path) as url, proxied(url) as (proxy, through):
        backend = open_backend(through)
        try:
            assert backend.acquire(AcquireRequest("job", slot(0), "me", lease=30)).run  # type: ignore[union-attr]
            # Within a second: the clock and the key are remembered, so the next step only swaps.
            proxy.set("delay", 2.0)
            result: list[Any] = []
            worker = threading.Thread(
                target=lambda: result.append(
                    backend.acquire(AcquireRequest("job", slot(1), "me", lease=30))  # type: ignore[union-attr]
                )
            )
            worker.start()
            time.sleep(1.3)  # the first attempt gave up (1 s); its bytes are still held
            proxy.set("pass")
            worker.join(30)
            assert result and result[0].outcome is Outcome.WON, result
            stored = {r.id: r for r in backend.runs("job")}  # type: ignore[union-attr]
            assert stored[result[0].run.id].token == result[0].run.token
            assert stored[result[0].run.id].owner == "me"
        finally:
            backend.close()


# -- instance processes ---------------------------------------------------------------------------


def start(name: str, url: str, folder: Path, **options: Any) -> subprocess.Popen[bytes]:
    args = {"name": name, "url": url, "log": str(folder / "runs.log"), **options}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    with (folder / f"{name}.err").open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.instance", json.dumps(args)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def lines(folder: Path) -> list[list[Any]]:
    log = folder / "runs.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_instances_starting_together_on_a_new_replicated_bucket_all_start(tmp_path: Path) -> None:
    with nats_cluster() as cluster:
        url = f"{cluster.url}?bucket=fresh&replicas=3"
        at = time.time() + 4  # every process imported and waiting: they open the store at once
        options = {"lease": 15, "heartbeat": 1, "every": 1, "work": 0.1, "start_at": at}
        procs = [start(f"i{n}", url, tmp_path, **options) for n in range(3)]
        try:
            wait_for(lambda: time.time() > at + 6, 30, "the instances to run a while")
            errors = [(tmp_path / f"i{n}.err").read_text() for n in range(3)]
            assert [p.poll() for p in procs] == [None, None, None], errors
            assert len({e[0] for e in lines(tmp_path) if e[4] == "done"}) >= 3
        finally:
            stop_all(procs)


LEASE = 15.0
"""Longer than an election (up to 9 s) and its wait: a run in flight keeps its lease through a
leader's death. (With 3 s, the issue's, a run whose handler ended during the election was run
again about one test in eight: a tick that had failed during the outage retried the slot and
took the expired lease over before the finish landed. See docs/backends/nats.md.)"""


def test_runs_are_neither_lost_nor_doubled_while_servers_are_killed(tmp_path: Path) -> None:
    with nats_cluster() as cluster:
        url, stream = f"{cluster.url}?bucket=race&replicas=3", "KV_race"
        options = {
            "lease": LEASE, "heartbeat": 1, "every": 1, "work": 0.3, "catch_up": 60,
            "stop_timeout": 5,
        }  # fmt: skip
        procs = [start(f"i{n}", url, tmp_path, **options) for n in range(3)]
        gaps: list[tuple[str, float]] = []
        try:
            wait_for(lambda: len(lines(tmp_path)) >= 6, 60, "the first runs")
            cluster.current(stream)
            for victim in ("leader", "follower", "leader"):
                node = cluster.leader(stream) if victim == "leader" else follower(cluster, stream)
                wait_for(lambda: in_flight(lines(tmp_path)), 10, "a run in flight")
                killed = time.time()
                node.kill()
                wait_for(lambda k=killed: started_after(lines(tmp_path), k), 60, "the next run")
                gaps.append((victim, started_after(lines(tmp_path), killed)[0] - killed))
                cluster.restart(node)
                cluster.current(stream)
            # The slots the last election missed are caught up (catch_up) beside the next ones;
            # stopping at once would hand back those not yet started.
            wait_for(lambda: not missing_slots(lines(tmp_path)), 30, "the missed slots' runs")
            assert [p.poll() for p in procs] == [None, None, None]
        finally:
            stopping = time.time()
            stop_all(procs)
        check_runs(lines(tmp_path), stopping)
        print("kill -> next run started:", ", ".join(f"{v} {s:.2f}s" for v, s in gaps))
        for victim, gap in gaps:
            assert gap < (ELECTION_BOUND if victim == "leader" else FOLLOWER_BOUND), gaps


def in_flight(events: list[list[Any]]) -> bool:
    """Whether the newest run started has not finished."""
    starts = [e for e in events if e[4] == "start"]
    return bool(starts) and not any(e[0] == starts[-1][0] and e[4] == "done" for e in events)


def started_after(events: list[list[Any]], moment: float) -> list[float]:
    return [e[5] for e in events if e[4] == "start" and e[5] > moment]


def check_runs(events: list[list[Any]], stopping: float) -> None:
    """Each slot started once and finished once; no token handed out twice; no slot skipped."""
    starts = [e for e in events if e[4] == "start"]
    done = [e[0] for e in events if e[4] == "done"]
    run_ids = [e[0] for e in starts]
    doubled = sorted({r for r in run_ids + done if (run_ids + done).count(r) > 2})
    seen = [e for e in events if e[0] in doubled]
    assert doubled == [], f"runs started or finished twice: {doubled}: {seen}"
    unfinished = [e[0] for e in starts if e[0] not in done and e[5] < stopping - 6]
    assert unfinished == [], f"runs started and never finished: {unfinished}"
    tokens = [e[2] for e in starts]
    assert len(set(tokens)) == len(tokens), "a token was handed out twice"
    missing = missing_slots(events)
    assert missing == set(), f"slots never run: {sorted(missing)}"


def missing_slots(events: list[list[Any]]) -> set[int]:
    """The slots (epoch seconds) between the first and the last slot started that never started."""
    seconds = {int(parse_run_id(e[0])[1].timestamp()) for e in events if e[4] == "start"}
    return set(range(min(seconds), max(seconds) + 1)) - seconds if seconds else set()
