"""RabbitMQ consumer mode's running half, a host beside the scheduler: the consumers that run
what the broker hands out (:mod:`relay.consumer_mode.consumers`, which needs pika).

Its store half is a backend, :mod:`relay.backends.rabbitmq_consumer`. Hosts ask
:func:`dispatcher` whether their backend hands runs out itself; pika is imported only when it does.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from relay.contract import ClaimBackend, LeaseBackend

if TYPE_CHECKING:
    from relay.consumer_mode.consumers import ConsumerDispatcher

__all__ = ["dispatcher"]


def dispatcher(backend: ClaimBackend | LeaseBackend) -> ConsumerDispatcher | None:
    """A dispatcher for ``backend`` if it hands runs out itself (RabbitMQ consumer mode): it
    publishes the runs won and runs this process's consumers. ``None`` for every other backend."""
    if "relay.backends.rabbitmq_consumer" not in sys.modules:
        return None  # no consumer-mode backend was ever opened: pika stays unimported
    from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
    from relay.consumer_mode.consumers import ConsumerDispatcher

    return ConsumerDispatcher(backend) if isinstance(backend, RabbitMQConsumerBackend) else None
