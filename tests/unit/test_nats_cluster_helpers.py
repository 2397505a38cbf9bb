"""The NATS backends' cluster helpers: every server of a URL, and which errors wait for a leader.

What they do against a real cluster (a leader SIGKILLed mid-step) is in
tests/backends/test_nats_cluster.py.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("nats")

import nats.errors
import nats.js.errors

from relay.backends._nats_cluster import leaderless, retried, server_urls
from relay.errors import ConfigurationError


@pytest.mark.parametrize(
    ("url", "servers"),
    [
        ("nats://h:4301,h:4302,h:4303", ["nats://h:4301", "nats://h:4302", "nats://h:4303"]),
        ("nats://u:p%40w@a:1,b:2", ["nats://u:p%40w@a:1", "nats://u:p%40w@b:2"]),
        ("tls://tok@a,b:4443", ["tls://tok@a", "tls://tok@b:4443"]),
        ("nats://[::1]:4222,127.0.0.1:4223", ["nats://[::1]:4222", "nats://127.0.0.1:4223"]),
        ("nats://localhost:4222", ["nats://localhost:4222"]),
    ],
)
def test_every_server_gets_the_scheme_and_the_credentials(url: str, servers: list[str]) -> None:
    assert server_urls(url) == servers


def test_a_malformed_server_list_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigurationError, match="host:port"):
        server_urls("nats://a:4301,b:x")


@pytest.mark.parametrize(
    ("error", "waits"),
    [
        (nats.errors.TimeoutError(), True),
        (nats.errors.NoRespondersError(), True),
        (nats.js.errors.NoStreamResponseError(), True),
        (nats.js.errors.APIError(code=503, err_code=10008, description="unavailable"), True),
        (nats.js.errors.APIError(code=503, err_code=10076, description="not enabled"), False),
        (nats.js.errors.NotFoundError(code=404, err_code=10037, description="no message"), False),
        (nats.errors.AuthorizationError(), False),
    ],
)
def test_only_errors_of_a_missing_leader_are_waited_out(error: Exception, waits: bool) -> None:
    assert leaderless(error) is waits


def test_a_request_goes_again_until_it_is_answered() -> None:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise nats.errors.NoRespondersError
        return "answer"

    assert asyncio.run(retried(attempt, 5)) == "answer"
    assert len(calls) == 3


def test_the_last_error_is_raised_once_the_time_is_up() -> None:
    async def attempt() -> str:
        raise nats.errors.NoRespondersError

    with pytest.raises(nats.errors.NoRespondersError):
        asyncio.run(retried(attempt, 0.3))


def test_other_errors_are_raised_at_once() -> None:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        raise nats.errors.AuthorizationError

    with pytest.raises(nats.errors.AuthorizationError):
        asyncio.run(retried(attempt, 5))
    assert len(calls) == 1


@pytest.mark.parametrize("replicas", ["0", "6", "three"])
def test_dedup_replicas_out_of_range_are_refused_before_connecting(replicas: str) -> None:
    from relay import open_backend

    with pytest.raises(ConfigurationError, match=f"replicas={replicas!r} must be"):
        open_backend(f"nats://127.0.0.1:1,127.0.0.1:2?strategy=dedup&replicas={replicas}")


@pytest.mark.parametrize(
    ("error", "sent_again"),
    [
        (nats.errors.ConnectionClosedError(), True),  # refused by nats-py before sending
        (nats.js.errors.APIError(err_code=10158), True),  # "in process": not stored by it
        (nats.errors.TimeoutError(), False),  # may have been stored: never sent again
        (nats.js.errors.APIError(err_code=10058), False),
    ],
)
def test_a_claim_is_sent_again_only_when_no_server_stored_it(
    error: Exception, sent_again: bool
) -> None:
    from relay.backends.nats_dedup import _unsent

    assert _unsent(error) is sent_again


def test_a_claim_whose_connection_closed_is_sent_again_but_a_timed_out_one_is_not() -> None:
    from relay.backends.nats_dedup import _unsent

    answers: list[Exception | str] = [nats.errors.ConnectionClosedError(), "stored"]

    async def attempt() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert asyncio.run(retried(attempt, 5, also=_unsent, unanswered=False)) == "stored"
    answers[:] = [nats.errors.TimeoutError(), "stored"]
    with pytest.raises(nats.errors.TimeoutError):
        asyncio.run(retried(attempt, 5, also=_unsent, unanswered=False))
