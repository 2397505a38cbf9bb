"""Checked by mypy, never run: the middleware's options are typed by the backend's capability,
and ``schedulable`` keeps the type of the actor it allows.

A line marked ``# type: ignore[...]`` must fail to type-check; mypy's ``warn_unused_ignores``
(part of ``--strict``) reports the ignore if it ever starts to pass.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from typing_extensions import assert_type

from relay.contract import ClaimBackend, LeaseBackend
from relay_dramatiq import RelayMiddleware, schedulable


def lease_backends_take_lease_options(backend: LeaseBackend) -> None:
    middleware = RelayMiddleware(backend, lease=30, heartbeat=10, queue_lease=300, tick=1)
    assert_type(middleware, RelayMiddleware[LeaseBackend])


def claim_backends_refuse_lease_options(backend: ClaimBackend) -> None:
    assert_type(RelayMiddleware(backend, tick=1), RelayMiddleware[ClaimBackend])
    RelayMiddleware(backend, lease=30)  # type: ignore[call-overload]
    RelayMiddleware(backend, heartbeat=10)  # type: ignore[call-overload]
    RelayMiddleware(backend, queue_lease=300)  # type: ignore[call-overload]


def urls_are_checked_when_opened() -> None:
    middleware = RelayMiddleware("sqlite:///relay.db", lease=30, queue_lease=300)
    assert_type(middleware, RelayMiddleware[Any])


def schedulable_keeps_the_actor_s_type(actor: dramatiq.Actor[[int], None]) -> None:
    assert_type(schedulable(actor), dramatiq.Actor[[int], None])
    schedulable(lambda n: None)  # type: ignore[type-var]
