"""Files of stored schedules (YAML or JSON), for teams that keep their schedules in git.

A file holds ``schedules:``, a list of definitions: ``name`` and ``task``, then any option of
:meth:`relay.Control.add_schedule` (times as ISO 8601 with a zone). :func:`export_text` writes the
store's schedules in that form (options left at their defaults are left out); :func:`plan` says
what :func:`apply` would change to make the store hold exactly the file (with ``prune``, removing
what the file does not name). Applying a file the store already matches changes no version.

:func:`apply` is all or nothing: every entry is checked first, with every rule of
:meth:`relay.Control.add_schedule` and ``update_schedule`` (a refusal names the entry's position
in the file and its name), then every change is written in one atomic step of the store
(:meth:`relay.schedule_store.ScheduleStore.apply_schedules`). The work is linear in the file's
size: the store's facts the rules need are read once, not once per entry.

YAML needs PyYAML (``pip install 'relay-scheduler[yaml]'``); JSON needs nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from relay.control import Control
from relay.control_schedules import _check_by, _json, _sized, operator
from relay.errors import ConfigurationError, Conflict, MissingDependency, UnknownSchedule
from relay.schedule_store import ScheduleWrite
from relay.stored import DEFINITION, Schedule, changes_between, check_schedule, to_definition

__all__ = ["Plan", "apply", "check", "export_text", "load", "plan"]

_DEFAULTS = to_definition(Schedule(name="", task=""))
_TIMES = ("at", "start", "end")


@dataclass
class Plan:
    """What applying a file changes: names to add, update (with their changes) and remove."""

    add: list[Schedule] = field(default_factory=list)
    update: list[tuple[Schedule, dict[str, Any]]] = field(default_factory=list)
    """Each wanted schedule and what changes (``field: [before, after]``)."""
    remove: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)
    """The version of each stored schedule the plan read: a change applies to it, or to none."""
    positions: dict[str, int] = field(default_factory=dict)
    """Each wanted schedule's position in the file (from 1), for the errors that name it."""

    def summary(self) -> list[str]:
        """One line per change, for the command's output."""
        lines = [f"add {s.name} (task {s.task})" for s in self.add]
        lines += [f"update {s.name}: {', '.join(sorted(c))}" for s, c in self.update]
        lines += [f"remove {name}" for name in self.remove]
        return lines


def load(path: Path) -> list[dict[str, Any]]:
    """The definitions a YAML or JSON file holds (a ``schedules:`` list, or a bare list)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"{path} is not text (byte {exc.start} is not UTF-8): give a YAML or JSON file"
        ) from None
    if path.suffix in (".yaml", ".yml"):
        yaml = _yaml()
        try:
            data = yaml.safe_load(text)
        except RecursionError:
            raise ConfigurationError(f"{path} nests too deep to be a file of schedules") from None
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
            problem = getattr(exc, "problem", None) or "malformed"
            raise ConfigurationError(
                f"{path} is not valid YAML ({problem}{at}); fix it, or check it with a YAML linter"
            ) from None
    else:
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigurationError(f"{path} nests too deep to be a file of schedules") from None
        except ValueError as exc:
            raise ConfigurationError(f"{path} is not JSON ({exc}); name YAML files .yaml") from None
    items = data.get("schedules") if isinstance(data, dict) else data
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ConfigurationError(
            f"{path} must hold 'schedules:', a list of definitions each with a name and a task"
        )
    counts = Counter(str(item.get("name")) for item in items)
    doubles = sorted(name for name, count in counts.items() if count > 1)
    if doubles:
        raise ConfigurationError(f"{path} names {', '.join(doubles)} more than once")
    return items


def plan(control: Control, items: list[dict[str, Any]], *, prune: bool = False) -> Plan:
    """Check every definition (all before any write) and compare them with the store.

    The rules that read the store (an ``at`` in the future, a task a live instance allows, a
    name no code-defined job has) are :func:`check`'s, which :func:`apply` runs too."""
    current = {s.name: s for s in control.schedules()}  # refuses a claim backend first
    store = control._lease_backend()
    result = Plan(versions={name: s.version for name, s in current.items()})
    for position, item in enumerate(items, start=1):
        schedule = _checked(store, item, position)
        result.positions[schedule.name] = position
        before = current.get(schedule.name)
        if before is None:
            result.add.append(schedule)
            continue
        diff = changes_between(before, schedule)
        if diff:
            result.update.append((schedule, diff))
        else:
            result.unchanged.append(schedule.name)
    if prune:
        result.remove = sorted(n for n in current if n not in result.positions)
    return result


def check(control: Control, steps: Plan, *, force: bool = False) -> None:
    """Refuse ``steps`` if any change breaks a rule of ``add_schedule`` or ``update_schedule``
    that reads the store: the first such entry of the file, by position and name."""
    checks = control.checks(force=force)
    changes = [(s, None) for s in steps.add] + [(s, diff) for s, diff in steps.update]
    for schedule, diff in sorted(changes, key=lambda c: steps.positions.get(c[0].name, 0)):
        try:
            if diff is None:
                checks.added(schedule)
            else:
                checks.updated(schedule, diff)
        except ConfigurationError as exc:
            raise type(exc)(f"{_entry(steps, schedule.name)}: {exc}") from None


def apply(control: Control, steps: Plan, *, by: str | None = None, force: bool = False) -> None:
    """Make every change ``steps`` lists in one atomic step, or none: each on the version
    :func:`plan` read, after :func:`check`. A schedule changed since raises
    :class:`~relay.errors.Conflict` naming its entry, and nothing is written."""
    _check_by(by)
    check(control, steps, force=force)
    writes = [
        ScheduleWrite("add", s.name, _sized(s), _json(changes_between(None, s))) for s in steps.add
    ]
    writes += [
        ScheduleWrite("update", s.name, _sized(s), _json(diff), steps.versions[s.name])
        for s, diff in steps.update
    ]
    current = {s.name: s for s in control.schedules()} if steps.remove else {}
    for name in steps.remove:
        before = current.get(name)
        if before is None:
            raise UnknownSchedule(
                f"no stored schedule named {name!r}: it was removed meanwhile", name=name
            )
        diff = changes_between(before, None)
        writes.append(ScheduleWrite("remove", name, None, _json(diff), steps.versions[name]))
    store = control._schedule_store("apply")
    try:
        store.apply_schedules(writes, by or operator())
    except (Conflict, UnknownSchedule) as exc:
        exc.args = (f"{_entry(steps, exc.name or '?')}: {exc}; nothing was written",)
        raise


def export_text(schedules: list[Schedule], path: Path) -> str:
    """The schedules as a file's text: YAML for ``.yaml``/``.yml``, else JSON."""
    items = []
    for schedule in schedules:
        values = to_definition(schedule)
        item = {"name": schedule.name, "task": schedule.task}
        item |= {k: v for k, v in values.items() if k != "task" and v != _DEFAULTS[k]}
        items.append(item)
    data = {"schedules": items}
    if path.suffix in (".yaml", ".yml"):
        return str(_yaml().safe_dump(data, sort_keys=False, allow_unicode=True))
    return json.dumps(data, indent=2) + "\n"


def _checked(store: Any, item: dict[str, Any], position: int) -> Schedule:
    values = dict(item)
    name, task = values.pop("name", None), values.pop("task", None)
    where = f"entry {position} (schedule {name!r})"
    unknown = sorted(set(values) - set(DEFINITION))
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown field(s) {', '.join(unknown)}; the fields are name, "
            f"{', '.join(DEFINITION)}"
        )
    for key in _TIMES:
        if isinstance(values.get(key), str):
            values[key] = _instant(values[key], f"{where}: {key}")
    try:
        return check_schedule(store, name, task, **values)
    except ConfigurationError as exc:
        raise type(exc)(f"{where}: {exc}") from None


def _entry(steps: Plan, name: str) -> str:
    """How an error names a change: its entry in the file (a removal has none)."""
    position = steps.positions.get(name)
    if position is None:
        return f"schedule {name!r} (not in the file: --prune removes it)"
    return f"entry {position} (schedule {name!r})"


def _options(schedule: Schedule) -> dict[str, Any]:
    values = {name: getattr(schedule, name) for name in DEFINITION}
    return {"name": schedule.name, **values}


def _instant(text: str, what: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(f"{what} {text!r} is not an ISO 8601 time") from None
    if value.utcoffset() is None:
        raise ConfigurationError(f"{what} {text!r} has no time zone: add Z or +01:00")
    return value


def _yaml() -> Any:
    try:
        import yaml  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise MissingDependency("pyyaml", "yaml", needed_by="a YAML file of schedules") from None
    return yaml
