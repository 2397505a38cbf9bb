"""A periodic Dramatiq actor, found by ``manage.py relay_dramatiq`` (the app's ``tasks`` module).

The broker is Dramatiq's StubBroker with Relay's middleware built from ``settings.RELAY``: the
scheduler process only enqueues, and the store shows what it won.
"""

import dramatiq
from dramatiq.brokers.stub import StubBroker

import relay_dramatiq
from relay_dramatiq.django import RelayMiddleware

broker = StubBroker()
broker.add_middleware(RelayMiddleware())
dramatiq.set_broker(broker)


@relay_dramatiq.periodic(every=1)
@dramatiq.actor
def tick() -> None:
    """Does nothing: the test looks at the runs the scheduler enqueued."""
