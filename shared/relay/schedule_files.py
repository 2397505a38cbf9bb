"""Files of stored schedules (YAML or JSON), for teams that keep their schedules in git.

A file holds ``schedules:``, a list of definitions: ``name`` and ``task``, then any option of
:meth:`relay.Control.add_schedule` (times as ISO 8601 with a zone). :func:`export_text` writes the
store's schedules in that form (options left at their defaults are left out); :func:`plan` says
what :func:`apply` would change to make the store hold exactly the file (with ``prune``, removing
what the file does not name). Applying a file the store already matches changes no version.

YAML needs PyYAML (``pip install 'relay-scheduler[yaml]'``); JSON needs nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from relay.control import Control
from relay.errors import ConfigurationError, MissingDependency
from relay.stored import DEFINITION, Schedule, changes_between, check_schedule, to_definition

__all__ = ["Plan", "apply", "export_text", "load", "plan"]

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
    names = [item.get("name") for item in items]
    doubles = sorted({str(n) for n in names if names.count(n) > 1})
    if doubles:
        raise ConfigurationError(f"{path} names {', '.join(doubles)} more than once")
    return items


def plan(control: Control, items: list[dict[str, Any]], *, prune: bool = False) -> Plan:
    """Check every definition (all before any write) and compare them with the store."""
    current = {s.name: s for s in control.schedules()}  # refuses a claim backend first
    store = control._lease_backend()
    wanted = [_checked(store, item) for item in items]
    result = Plan()
    for schedule in wanted:
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
        names = {s.name for s in wanted}
        result.remove = sorted(n for n in current if n not in names)
    return result


def apply(control: Control, steps: Plan, *, by: str | None = None, force: bool = False) -> None:
    """Make the changes ``steps`` lists, each on the version :func:`plan` read."""
    current = {s.name: s for s in control.schedules()}
    for schedule in steps.add:
        control.add_schedule(**_options(schedule), by=by, force=force)
    for schedule, _ in steps.update:
        version = current[schedule.name].version
        values = {k: v for k, v in _options(schedule).items() if k != "name"}
        control.update_schedule(schedule.name, version=version, by=by, force=force, **values)
    for name in steps.remove:
        control.remove_schedule(name, version=current[name].version, by=by)


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


def _checked(store: Any, item: dict[str, Any]) -> Schedule:
    values = dict(item)
    name, task = values.pop("name", None), values.pop("task", None)
    unknown = sorted(set(values) - set(DEFINITION))
    if unknown:
        raise ConfigurationError(
            f"schedule {name!r}: unknown field(s) {', '.join(unknown)}; the fields are name, "
            f"{', '.join(DEFINITION)}"
        )
    for key in _TIMES:
        if isinstance(values.get(key), str):
            values[key] = _instant(values[key], f"schedule {name!r}: {key}")
    try:
        return check_schedule(store, name, task, **values)
    except ConfigurationError as exc:
        raise type(exc)(f"schedule {name!r}: {exc}") from None


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
