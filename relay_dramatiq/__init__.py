"""Relay for Dramatiq: periodic actors that any number of schedulers and workers can run safely.

* :class:`RelayMiddleware` on the broker runs each run message through Relay (start with the
  run's token, heartbeat, finish, hand over) and holds the backend settings;
* :func:`periodic` above ``@dramatiq.actor`` schedules an actor;
* ``relay-dramatiq APP_MODULE`` (:class:`Scheduler`) decides runs and enqueues those it wins;
* :func:`current_run` inside the actor gives the :class:`~relay.Run` being performed.
"""

from relay_dramatiq._middleware import DEFAULT_QUEUE_LEASE, RelayMiddleware, current_run
from relay_dramatiq._periodic import Periodic, periodic, periodic_actors
from relay_dramatiq._scheduler import Scheduler

__all__ = [
    "DEFAULT_QUEUE_LEASE",
    "Periodic",
    "RelayMiddleware",
    "Scheduler",
    "current_run",
    "periodic",
    "periodic_actors",
]
