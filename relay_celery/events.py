"""Relay's events in a Celery app: hooks with :func:`on`, and the :data:`relay_event` signal.

Beat and the workers are separate processes, and each reports what happens in it on this module's
:data:`bus` (and through :data:`relay_event`):

* **beat** decides: won, lost, skipped, missed, taken over, retried, picked up, exhausted,
  dispatched (published), store unavailable and recovered, and handed over for a run it could
  not publish;
* **the worker** runs: started, succeeded, failed, handed over (a worker stopping under a task),
  fenced off.

Register hooks where the app is defined, so both processes import them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from celery.utils.dispatch import Signal

from relay.events import Event, EventBus

__all__ = ["bus", "on", "relay_event"]

EventT = TypeVar("EventT", bound=Event)

bus = EventBus()
"""The events of this process's beat scheduler and worker; each is logged."""

relay_event = Signal(name="relay_event", providing_args=["event"])
"""Sent for every Relay event, with ``sender`` the event's class and ``event`` the event.

``@relay_event.connect(sender=RunTakenOver)`` receives takeovers only. A receiver that raises is
logged by Celery and never breaks a run.
"""


def on(event_type: type[EventT], callback: Callable[[EventT], object]) -> Callable[[], None]:
    """Call ``callback(event)`` for every event of ``event_type`` in this process.

    ``on(relay.events.Event, cb)`` receives every event; a callback that raises is logged and
    never breaks a run. Returns a function that unsubscribes.
    """
    return bus.on(event_type, callback)


def _send_signal(event: Event) -> None:
    relay_event.send(sender=type(event), event=event)


bus.on(Event, _send_signal)
