"""Relay for Dramatiq: periodic actors that any number of schedulers and workers can run safely.

* :class:`RelayMiddleware` on the broker runs each run message through Relay (start with the
  run's token, heartbeat, finish, hand over) and holds the backend settings;
* :func:`periodic` above ``@dramatiq.actor`` schedules an actor;
* :func:`schedulable` above ``@dramatiq.actor`` lets stored schedules
  (:meth:`relay.Control.add_schedule`) run an actor with their arguments;
* ``relay-dramatiq APP_MODULE`` (:class:`Scheduler`) decides runs, of periodic actors and of
  stored schedules, and enqueues those it wins;
* :func:`current_run` inside the actor gives the :class:`~relay.Run` being performed.
"""

from relay_dramatiq._middleware import DEFAULT_QUEUE_LEASE, RelayMiddleware, current_run
from relay_dramatiq._periodic import Periodic, periodic, periodic_actors
from relay_dramatiq._scheduler import Scheduler
from relay_dramatiq._stored import MESSAGE_OPTIONS, schedulable, schedulable_actors

__all__ = [
    "DEFAULT_QUEUE_LEASE",
    "MESSAGE_OPTIONS",
    "Periodic",
    "RelayMiddleware",
    "Scheduler",
    "current_run",
    "periodic",
    "periodic_actors",
    "schedulable",
    "schedulable_actors",
]
