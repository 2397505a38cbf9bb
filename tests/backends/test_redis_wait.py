"""``wait_replicas``: Redis lease steps confirmed by replicas, on a real primary and replica.

The replica is frozen with SIGSTOP to make a step go unconfirmed: the primary did it, WAIT
answers 0, and the step counts as not done (:mod:`relay.engine.unacknowledged`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from relay import open_backend
from relay.backends._redis_wait import DEFAULT_WAIT_TIMEOUT, WaitFor
from relay.backends._url import BackendURL
from relay.backends.redis_lease import RedisLeaseBackend
from relay.contract import AcquireRequest, Outcome
from relay.engine import Decider, Loop, Runner, Won
from relay.errors import ConfigurationError, NotAcknowledged
from relay.jobs import Job
from relay.runs import RunState
from relay.schedules import make_schedule
from tests.support.redis_server import RedisServer, own_redis, own_redis_replicated

UTC = timezone.utc


# -- options, no server -------------------------------------------------------------------------


def wait_for(query: str) -> WaitFor:
    return WaitFor.from_url(BackendURL(f"redis://127.0.0.1:6379/0?{query}"))


def test_options_are_read_once_with_their_defaults() -> None:
    assert wait_for("") == WaitFor(0, DEFAULT_WAIT_TIMEOUT)
    assert wait_for("wait_replicas=2&wait_timeout=0.25") == WaitFor(2, 0.25)
    assert WaitFor(1, 0.25).command == ("WAIT", 1, 250)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("wait_replicas=one", "whole number"),
        ("wait_replicas=-1", "whole number"),
        ("wait_replicas=1.5", "whole number"),
        ("wait_replicas=1&wait_timeout=0", "positive number"),
        ("wait_replicas=1&wait_timeout=soon", "positive number"),
        ("wait_replicas=1&wait_timeout=12", "lower wait_timeout"),
        ("wait_replicas=1&wait_timeout=2&socket_timeout=1", "lower wait_timeout"),
    ],
)
def test_bad_options_are_refused_naming_the_fix(query: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        wait_for(query)


def test_a_backend_refuses_bad_values_when_made() -> None:
    with pytest.raises(ConfigurationError, match="negative"):
        WaitFor(-1)
    with pytest.raises(ConfigurationError, match="waits for ever"):
        WaitFor(1, 0)


# -- a real primary and replica -----------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[RedisServer]]:
    with own_redis_replicated(tmp_path) as servers:
        yield servers


def url(server: RedisServer, query: str = "wait_replicas=1&wait_timeout=2") -> str:
    return f"{server.url}?{query}"


def slot(minutes_ago: int = 0) -> datetime:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now - timedelta(minutes=minutes_ago)


def thaw(primary: RedisServer, replica: RedisServer) -> None:
    """Let the replica go on, and wait until it confirms a write again (a loaded machine may
    take longer than a step's wait_timeout to wake it)."""
    replica.thaw()
    with redis.Redis(port=primary.port) as client:
        client.set("relay-test:sync", 1)
        assert client.wait(1, 30_000) == 1, "the replica never caught up"


def record(server: RedisServer, run_id: str) -> dict[str, str]:
    """A run's hash as ``server`` (primary or replica) holds it."""
    job, _, member = run_id.rpartition("@")
    with redis.Redis(port=server.port, decode_responses=True) as client:
        return client.hgetall(f"relay:{{{job}}}:run:{member}")


@pytest.mark.redis
def test_more_replicas_than_connected_is_refused_at_open(pair: list[RedisServer]) -> None:
    with pytest.raises(ConfigurationError, match=r"1 replica\(s\) connected.*wait_replicas=2"):
        open_backend(url(pair[0], "wait_replicas=2"))


@pytest.mark.redis
def test_replicas_without_wait_replicas_are_named_in_one_warning(
    pair: list[RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="relay.backends.redis"):
        for _ in range(2):
            open_backend(pair[0].url).close()
    (warning,) = [r for r in caplog.records if "wait_replicas" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "1 replica(s)" in warning.getMessage()


@pytest.mark.redis
def test_a_server_without_replicas_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with own_redis(tmp_path) as server, caplog.at_level(logging.WARNING):
        open_backend(server.url).close()
        with pytest.raises(ConfigurationError, match="0 replica"):
            open_backend(url(server))
    assert not [r for r in caplog.records if "replica" in r.getMessage()]


@pytest.mark.redis
def test_every_changing_step_is_on_the_replica_when_it_returns(pair: list[RedisServer]) -> None:
    primary, replica = pair
    backend = open_backend(url(primary))
    assert isinstance(backend, RedisLeaseBackend)
    assert (backend.wait_replicas, backend.wait_timeout) == (1, 2.0)
    result = backend.acquire(AcquireRequest("job", slot(), "a", 30, max_attempts=2))
    assert result.run is not None
    run = result.run
    assert record(replica, run.id)["token"] == str(run.token)
    backend.start(run.id, run.token, "a", 30)
    assert record(replica, run.id)["started_ms"]
    assert backend.finish(run.id, run.token, succeeded=False) is RunState.PENDING
    assert record(replica, run.id)["state"] == "pending"
    assert backend.skip("job", slot(1), "missed")
    assert record(replica, f"job@{slot(1).strftime('%Y-%m-%dT%H:%M:%SZ')}")["state"] == "skipped"
    assert backend.pause("job", "test", "me")
    with redis.Redis(port=replica.port, decode_responses=True) as client:
        assert client.hget("relay:{job}:control", "paused_ms")
    backend.close()


def one_job() -> Job:
    return Job(
        name="job", schedule=make_schedule(cron=None, every=60, tz=None), handler=lambda run: None
    )


@pytest.mark.redis
def test_a_won_run_not_confirmed_is_not_started_and_comes_back_with_no_attempt_spent(
    pair: list[RedisServer],
) -> None:
    primary, replica = pair
    backend = open_backend(url(primary))
    decider = Decider(backend, owner="a", lease=30)
    decider.add(one_job())
    loop = Loop(decider, interval=1, sweep_every=1)
    sent: list[Won] = []
    replica.freeze()
    try:
        step = loop.step(lambda won: sent.append(won) is None, force=True)
        assert not step.healthy and sent == []  # not confirmed: not started
        (held,) = backend.runs("job")
        assert (held.state, held.attempt, held.reason) == (RunState.PENDING, 0, "released")
    finally:
        thaw(primary, replica)
    step = loop.step(lambda won: sent.append(won) is None, force=True)
    assert step.healthy
    # A step that straddles a minute also wins the next slot's run: only the held one matters.
    (won,) = [w for w in sent if w.run.id == held.id]
    assert (won.run.attempt, won.run.token > held.token) == (1, True)
    assert record(replica, won.run.id)["token"] == str(won.run.token)
    backend.close()


@pytest.mark.redis
def test_a_start_not_confirmed_is_handed_back_without_a_failure(pair: list[RedisServer]) -> None:
    primary, replica = pair
    backend = open_backend(url(primary))
    run = backend.acquire(AcquireRequest("job", slot(), "a", 30, max_attempts=1)).run
    assert run is not None
    runner = Runner(backend, owner="a", lease=30, heartbeat=10)
    replica.freeze()
    try:
        with pytest.raises(NotAcknowledged):
            runner.begin(run)
    finally:
        thaw(primary, replica)
    again = backend.acquire(AcquireRequest("job", slot(), "b", 30, max_attempts=1))
    assert again.outcome is Outcome.WON and again.run is not None  # max_attempts=1: none spent
    assert (backend.runs("job")[0].failures, again.run.token > run.token) == (0, True)
    backend.close()


@pytest.mark.redis
@pytest.mark.parametrize(("succeeded", "state"), [(True, "succeeded"), (False, "pending")])
def test_a_finish_not_confirmed_is_sent_again_and_counted_once(
    pair: list[RedisServer], succeeded: bool, state: str
) -> None:
    primary, replica = pair
    backend = open_backend(url(primary))
    run = backend.acquire(AcquireRequest("job", slot(), "a", 30, max_attempts=3)).run
    assert run is not None
    active = Runner(backend, owner="a", lease=30, heartbeat=10).begin(run)
    assert active is not None
    replica.freeze()
    # Thawed once the first try gave up waiting (2 s), before the second one (0.5 s later).
    thawed = threading.Timer(2.2, replica.thaw)
    thawed.start()
    try:
        began = time.monotonic()
        answer = active.succeed() if succeeded else active.fail("boom")
        took = time.monotonic() - began
    finally:
        thawed.join()
        replica.thaw()
    assert answer is RunState(state) and took > 2.2  # the first try was not confirmed
    on_replica = record(replica, run.id)
    assert (on_replica["state"], on_replica["failures"]) == (state, "0" if succeeded else "1")
    assert record(primary, run.id) == on_replica
    backend.close()


@pytest.mark.redis
def test_a_user_the_acl_forbids_info_gets_no_warning_and_no_refusal(
    pair: list[RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    primary = pair[0]
    with redis.Redis(port=primary.port) as client:
        client.acl_setuser(
            "relay", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-info"]
        )
    where = f"redis://relay:pw@127.0.0.1:{primary.port}/0"
    with caplog.at_level(logging.WARNING):
        open_backend(where).close()  # replicas, no wait_replicas: it cannot know, says nothing
        backend = open_backend(f"{where}?wait_replicas=1&wait_timeout=2")
    assert not [r for r in caplog.records if "replica" in r.getMessage()]
    assert backend.acquire(AcquireRequest("job", slot(), "a", 30)).outcome is Outcome.WON
    backend.close()


@pytest.mark.redis
def test_a_schedule_change_not_confirmed_raises_and_reads_do_not_wait(
    pair: list[RedisServer],
) -> None:
    from relay import Control

    primary, replica = pair
    with Control(url(primary, "wait_replicas=1&wait_timeout=3")) as control:
        control.add_schedule("s", "t", every=60, force=True)  # confirmed
        replica.freeze()
        try:
            with pytest.raises(NotAcknowledged):
                control.update_schedule("s", version=1, every=30)
            assert control.schedule("s").version == 2  # the primary did it; reads do not wait
        finally:
            thaw(primary, replica)


@pytest.mark.redis
def test_a_run_found_held_under_a_lease_not_confirmed_is_not_counted_as_decided(
    pair: list[RedisServer],
) -> None:
    """b finds a's lease, which the replica does not have yet. Counted as decided, the run would
    be lost if a handed it back (its lease was not confirmed) and a failover then promoted the
    replica, which has neither write. The refusal rests on what b read, so it is confirmed only
    once the replica has that too: Redis's WAIT after a command that wrote nothing counts every
    write the server had done by then, whichever connection made it."""
    primary, replica = pair
    a, b = open_backend(url(primary)), open_backend(url(primary))
    at = slot()
    # b has written (listing both jobs), and the replica confirmed it.
    for job in ("job", "other"):
        assert b.acquire(AcquireRequest(job, at - timedelta(minutes=1), "b", 30)).run
    run_of = AcquireRequest("job", at, "b", 30)
    replica.freeze()
    try:
        with pytest.raises(NotAcknowledged):
            a.acquire(AcquireRequest("job", at, "a", 30))
        with pytest.raises(NotAcknowledged):
            b.acquire(run_of)
    finally:
        thaw(primary, replica)
    assert b.acquire(run_of).outcome is Outcome.HELD  # the replica has a's lease now
    assert record(replica, f"job@{at.strftime('%Y-%m-%dT%H:%M:%SZ')}")["owner"] == "a"
    a.close()
    b.close()
