"""RabbitMQ's ``timeout``: through a proxy whose packets vanish, calls fail in time, then work.

The claim backend and consumer mode are opened through :mod:`tests.support.fault_proxy` with a
short ``timeout``, in front of the machine's RabbitMQ. In ``drop`` mode (connections stay open,
nothing flows, no reset) a claim raises ``BackendUnavailable`` within the timeout of the
operation plus one reconnect, where pika alone would wait for the AMQP heartbeat (a minute);
once the path heals, the next claim works on a new connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from relay import BackendUnavailable, ConfigurationError, RunState, open_backend
from relay.backends._amqp import pika_parameters, timeout_of
from relay.backends._url import BackendURL
from relay.deadlines import DEFAULT_TIMEOUT
from relay.runs import Run, run_id
from tests.support.claim_backends import rabbitmq_claim
from tests.support.fault_proxy import FaultProxy, proxied

TIMEOUT = 0.5
SLACK = 3.0
"""Seconds a loaded machine may add to a call that fails in time; a hang lasts a minute."""
SLOT = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["claim", "consumer"])
def through_proxy(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[FaultProxy, Any]]:
    """The claim backend, or consumer mode, opened through a fault proxy with ``timeout=0.5``."""
    mode = "&mode=consumer" if request.param == "consumer" else ""
    with rabbitmq_claim(tmp_path) as url, proxied(url) as (proxy, near):
        backend: Any = open_backend(f"{near}{mode}&timeout={TIMEOUT}")
        try:
            yield proxy, backend
        finally:
            proxy.set("pass")
            backend.close()


def fails_in_time(call: Callable[[], object], within: float) -> float:
    """Seconds ``call`` took to raise ``BackendUnavailable``, which must be under ``within``."""
    began = time.monotonic()
    with pytest.raises(BackendUnavailable):
        call()
    took = time.monotonic() - began
    assert TIMEOUT * 0.9 <= took < within + SLACK, took
    return took


def claims_again(backend: Any, minute: int) -> bool:
    give_up = time.monotonic() + 15
    while True:
        try:
            return bool(backend.claim("deadline", SLOT.replace(minute=minute)))
        except BackendUnavailable:
            assert time.monotonic() < give_up, "the backend never worked again"
            time.sleep(0.2)


@pytest.mark.rabbitmq
def test_a_claim_whose_packets_vanish_fails_in_time_and_the_next_one_works(
    through_proxy: tuple[FaultProxy, Any],
) -> None:
    proxy, backend = through_proxy
    assert backend.timeout == TIMEOUT
    assert backend.claim("deadline", SLOT) is True
    proxy.set("drop")
    # The open connection's publish times out, then one reconnect does (its AMQP handshake).
    for minute in (1, 2):
        slot = SLOT.replace(minute=minute)
        took = fails_in_time(partial(backend.claim, "deadline", slot), 2 * TIMEOUT)
        print(f"\n{backend.name}: a claim failed {took:.2f}s after the drop")
    proxy.set("pass")
    assert claims_again(backend, 3) is True
    assert backend.claim("deadline", SLOT) is False  # the same gate queue still holds the claim


@pytest.mark.rabbitmq
def test_consumer_mode_publishes_and_records_in_time_through_vanishing_packets(
    tmp_path: Path,
) -> None:
    with rabbitmq_claim(tmp_path) as url, proxied(url) as (proxy, near):
        backend: Any = open_backend(f"{near}&mode=consumer&timeout={TIMEOUT}")
        try:
            run = Run(
                id=run_id("deadline", SLOT),
                job="deadline",
                scheduled_for=SLOT,
                token=0,
                attempt=1,
                owner="me",
            )
            backend.publish(run)  # declares the job's queues: the connection is in use
            proxy.set("drop")
            fails_in_time(lambda: backend.publish(run), 2 * TIMEOUT)
            began = time.monotonic()
            assert backend.record(run, RunState.SUCCEEDED) is False  # logged, never raised
            assert time.monotonic() - began < 2 * TIMEOUT + SLACK
            proxy.set("pass")
            assert claims_again(backend, 1) is True
            assert backend.record(run, RunState.SUCCEEDED) is True
        finally:
            proxy.set("pass")
            backend.close()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_timeout_is_refused_when_the_backend_is_opened(value: str) -> None:
    for mode in ("", "&mode=consumer"):
        with pytest.raises(ConfigurationError, match=rf"timeout={value!r}"):
            open_backend(f"amqp://guest:guest@127.0.0.1:1/%2F?prefix=p{mode}&timeout={value}")


def test_the_timeout_bounds_every_connect_unless_the_url_sets_pika_s_own() -> None:
    parsed = BackendURL("amqp://h/%2F?timeout=0.7")
    parameters = pika_parameters(parsed, (), timeout_of(parsed))
    assert (
        parameters.socket_timeout, parameters.stack_timeout, parameters.blocked_connection_timeout
    ) == (0.7, 0.7, 0.7)  # fmt: skip
    default = pika_parameters(BackendURL("amqp://h/%2F"), ())
    assert default.stack_timeout == default.socket_timeout == DEFAULT_TIMEOUT
    own = pika_parameters(
        BackendURL("amqp://h/%2F?socket_timeout=5&blocked_connection_timeout=60"), (), 0.7
    )
    assert (own.socket_timeout, own.stack_timeout, own.blocked_connection_timeout) == (5, 0.7, 60)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("mode", ["", "&mode=consumer"], ids=["claim", "consumer"])
def test_connecting_through_vanishing_packets_fails_within_the_timeout(
    mode: str, tmp_path: Path
) -> None:
    with rabbitmq_claim(tmp_path) as url, proxied(url) as (proxy, near):
        proxy.set("drop")  # the TCP handshake completes; the AMQP handshake hears nothing
        fails_in_time(partial(open_backend, f"{near}{mode}&timeout={TIMEOUT}"), TIMEOUT)
        proxy.set("pass")
        backend: Any = open_backend(f"{near}{mode}&timeout={TIMEOUT}")
        try:
            assert backend.claim("deadline", SLOT) is True
        finally:
            backend.close()
