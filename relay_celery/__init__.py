"""Relay for Celery: run several ``celery beat`` processes; each scheduled run happens once.

``install(app, backend=...)`` where the app is defined sets up both sides: the workers' run hooks,
and ``relay_celery.RelayScheduler`` as ``beat_scheduler`` (unless the app names another). Inside a
task started by beat, :func:`current_run` returns its :class:`~relay.Run`. Hooks: :func:`on`
(``relay_celery.on(RunFailed, callback)``) or the :data:`relay_event` signal. Stored schedules
(:meth:`relay.Control.add_schedule`) run only the tasks :func:`schedulable` allows.
"""

from relay.engine import current_run
from relay_celery.beat import RelayScheduler
from relay_celery.events import on, relay_event
from relay_celery.stored import schedulable
from relay_celery.worker import install

__all__ = ["RelayScheduler", "current_run", "install", "on", "relay_event", "schedulable"]
