"""Stored schedules on Celery beat: the tasks they may run, and how a won run is published.

A stored schedule (:meth:`relay.Control.add_schedule`) names a Celery task. Beat runs it only if
the app allows that task: :func:`schedulable` (on a task, or with task names and ``app=``) or the
``relay_schedulable_tasks`` setting. Whoever can write to the store can thus run only those tasks,
with the publish options of :data:`PUBLISH_OPTIONS` and nothing else: no callbacks (``link``),
no task id, no producer.

Each won run is published as its task, the stored ``args``/``kwargs`` as the task's own arguments
and the stored ``options`` as publish options, with the same run header as a ``beat_schedule``
entry's run.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast, overload

from celery import Celery, Task
from celery.app.task import Context

from relay.engine import Won
from relay.errors import ConfigurationError
from relay.runs import HEADER
from relay.settings import Settings, check_task_name
from relay.stored import Schedule

__all__ = [
    "PUBLISH_OPTIONS",
    "RESERVED_HEADERS",
    "StoredTask",
    "allowed_tasks",
    "publish_options",
    "schedulable",
    "stored_task",
]

T = TypeVar("T", bound="Task[Any, Any]")

_TEXT = ("queue", "exchange", "routing_key")
_SECONDS = ("expires", "time_limit", "soft_time_limit")
PUBLISH_OPTIONS = frozenset({*_TEXT, *_SECONDS, "priority", "headers", "ignore_result"})
"""The publish options a stored schedule may set (``apply_async``'s, by the same names)."""
_PROTOCOL_HEADERS = frozenset({
    "lang", "task", "id", "shadow", "eta", "expires", "group", "group_index", "retries",
    "timelimit", "root_id", "parent_id", "argsrepr", "kwargsrepr", "origin", "ignore_result",
    "replaced_task_nesting", "stamped_headers", "stamps",
})  # fmt: skip
RESERVED_HEADERS = frozenset({
    *_PROTOCOL_HEADERS, *(name for name in vars(Context) if not name.startswith("_")),
    "groups", HEADER, "celery_beat_task",
})  # fmt: skip
"""Header names a stored schedule's ``headers`` may not set. Celery lets a publish's headers
override its own message headers (``task``, ``id``…) and its workers read the task's request from
them: a stored ``{"task": ...}`` would run another task. So Celery's message headers, the names
of its task request, and Relay's own are refused."""
_names: weakref.WeakKeyDictionary[Celery, set[str]] = weakref.WeakKeyDictionary()
_tasks: list[tuple[Celery | None, Task[Any, Any]]] = []
"""Task objects allowed, with their app if given: read at beat (or worker) start, because a task
``@app.task`` makes before the app is finalized is a lazy proxy that reading would evaluate."""


@overload
def schedulable(task: T, /, *more: str | Task[Any, Any], app: Celery | None = None) -> T: ...
@overload
def schedulable(task: str, /, *more: str | Task[Any, Any], app: Celery | None = None) -> None: ...
def schedulable(
    task: str | Task[Any, Any], /, *more: str | Task[Any, Any], app: Celery | None = None
) -> Any:
    """Allow stored schedules to run these tasks (task objects, or names with ``app=``).

    ``@relay_celery.schedulable`` above ``@app.task`` (or ``@shared_task``: it then belongs to
    the app beat runs) allows the task and returns it (given task objects first, it returns the
    first); ``relay_celery.schedulable("proj.tasks.report", app=app)`` allows a task by name (one
    the workers know, maybe not beat). Call it in the module beat loads; beat records the allowed
    names with its heartbeat, so ``add_schedule`` accepts them. Nothing else may be run by a
    stored schedule: a schedule naming another task is reported not runnable, never sent.
    """
    for each in (task, *more):
        # Not isinstance(): it reads __class__, which evaluates a lazy task.
        if type(each) is not str:
            _tasks.append((app, cast("Task[Any, Any]", each)))
        elif app is None:
            raise ConfigurationError(
                f"relay_celery.schedulable({each!r}): a task name needs the app it belongs to; "
                "pass app=app"
            )
        else:
            _names.setdefault(app, set()).add(check_task_name(each))
    return None if type(task) is str else task


def allowed_tasks(app: Celery, settings: Settings) -> tuple[str, ...]:
    """The task names stored schedules may run with ``app``: :func:`schedulable`'s and the
    ``relay_schedulable_tasks`` setting's, sorted."""
    names = set(_names.get(app, ())).union(settings.schedulable_tasks)
    for owner, task in _tasks:
        if (owner if owner is not None else task.app) is app:
            names.add(check_task_name(task.name))
    return tuple(sorted(names))


Send = Callable[[Won, str, tuple[Any, ...], dict[str, Any], dict[str, Any]], None]
"""Beat's publisher: a won run, its task name, args, kwargs and publish options."""


@dataclass(frozen=True, slots=True)
class StoredTask:
    """A stored schedule's handler on beat: publishes a won run as the task, with the stored
    arguments and options it was won with (one small object per stored schedule)."""

    send: Send
    task: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]
    version: int

    def __call__(self, won: Won) -> None:
        """Publish ``won`` as this task."""
        self.send(won, self.task, self.args, dict(self.kwargs), dict(self.options))


def stored_task(schedule: Schedule, send: Send, task: Task[Any, Any] | None = None) -> StoredTask:
    """The handler of ``schedule`` on beat. Its options are checked, and its arguments against
    ``task``'s signature when beat knows the task (``ConfigurationError``), as ``apply_async``
    would check them at every slot."""
    args, kwargs = tuple(schedule.args), dict(schedule.kwargs or {})
    check = getattr(task, "__header__", None) if task is not None and task.typing else None
    if check is not None:
        try:
            check(*args, **kwargs)
        except TypeError as exc:
            raise ConfigurationError(
                f"its arguments do not fit task {schedule.task!r} ({exc}): edit its args or kwargs"
            ) from None
    return StoredTask(
        send, schedule.task, args, kwargs, publish_options(schedule.options), schedule.version
    )


def publish_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Check a stored schedule's ``options``: :data:`PUBLISH_OPTIONS` only, each of its type."""
    unknown = sorted(set(options) - PUBLISH_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"Celery beat publishes a stored schedule only with the options "
            f"{', '.join(sorted(PUBLISH_OPTIONS))}; remove {', '.join(map(repr, unknown))}"
        )
    for key, value in options.items():
        if key in _TEXT:
            ok = isinstance(value, str) and bool(value)
        elif key in _SECONDS:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        elif key == "priority":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255
        elif key == "ignore_result":
            ok = isinstance(value, bool)
        else:  # headers
            ok = isinstance(value, Mapping) and not RESERVED_HEADERS.intersection(value)
        if not ok:
            raise ConfigurationError(f"option {key!r}={value!r} is refused: {_EXPECTED[key]}")
    return dict(options)


_EXPECTED = {
    **dict.fromkeys(_TEXT, "give a non-empty string"),
    **dict.fromkeys(_SECONDS, "give a positive number of seconds"),
    "priority": "give an integer from 0 to 255",
    "ignore_result": "give true or false",
    "headers": "give a dict of your own message headers, none of Celery's or Relay's (such as "
    "'task', 'id', 'eta', 'reply_to' or 'relay_run'; relay_celery.stored.RESERVED_HEADERS)",
}
