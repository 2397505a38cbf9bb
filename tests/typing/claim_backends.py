"""Checked by mypy, never run: the server claim backends are claim backends to the type checker.

A line marked ``# type: ignore[...]`` must fail to type-check; mypy's ``warn_unused_ignores``
(part of ``--strict``) reports the ignore if it ever starts to pass.
"""

from __future__ import annotations

from typing_extensions import assert_type

import relay
from relay.backends.nats_dedup import NatsClaimBackend
from relay.backends.rabbitmq import RabbitMQClaimBackend
from relay.backends.redis_claim import RedisClaimBackend
from relay.contract import ClaimBackend


def each_is_a_claim_backend(
    redis: RedisClaimBackend, rabbitmq: RabbitMQClaimBackend, nats: NatsClaimBackend
) -> list[ClaimBackend]:
    return [redis, rabbitmq, nats]


def schedulers_on_them_refuse_lease_options(
    redis: RedisClaimBackend, rabbitmq: RabbitMQClaimBackend, nats: NatsClaimBackend
) -> None:
    assert_type(relay.Scheduler(redis, tick=1), relay.Scheduler[ClaimBackend])
    relay.Scheduler(redis, lease=30)  # type: ignore[call-overload]
    relay.Scheduler(rabbitmq, heartbeat=10)  # type: ignore[call-overload]
    scheduler = relay.Scheduler(nats)
    scheduler.job(every=60, stale_after=30)
    scheduler.job(every=60, overlap="skip")  # type: ignore[call-arg]
    scheduler.job(every=60, max_attempts=3)  # type: ignore[call-arg]
    scheduler.job(every=60, catch_up=600)  # type: ignore[call-arg]
