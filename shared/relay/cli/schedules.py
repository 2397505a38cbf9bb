"""``relay schedules``: list, show, add, edit, remove stored schedules, see their history, and
export or apply a file of them (YAML or JSON). Each subcommand calls :class:`relay.Control`;
``list``, ``show``, ``history`` and ``export`` only read (the store is opened read-only and nothing
is created)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from relay.cli._format import piped
from relay.cli._options import backend_option, duration, instant, json_option
from relay.cli._stores import control as _control
from relay.control_schedules import describe
from relay.schedule_files import apply as apply_plan
from relay.schedule_files import check, export_text, load, plan
from relay.stored import Schedule, ScheduleChange, to_definition

__all__ = ["schedules"]

F = TypeVar("F", bound=Callable[..., Any])


def _json_value(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not JSON", param_hint=option) from None


# Each option of a definition: its flag, how its text becomes a value, and its help.
_FIELDS: list[tuple[str, Callable[[str, str], Any], str]] = [
    ("cron", lambda t, o: t, "Cron expression (five fields), with --tz."),
    ("every", duration, "Interval: seconds, or 90s, 15m, 12h, 1d."),
    ("at", instant, "One run at this ISO time (with a zone)."),
    ("tz", lambda t, o: t, "IANA time zone of --cron, such as Europe/Paris."),
    ("args", _json_value, "The task's arguments as a JSON list."),
    ("kwargs", _json_value, "The task's keyword arguments as a JSON object."),
    ("start", instant, "No slot before this ISO time."),
    ("end", instant, "No slot after this ISO time."),
    ("max_runs", lambda t, o: int(t), "At most this many slots, then it ends."),
    ("overlap", lambda t, o: t, "allow, skip or buffer_one."),
    ("catch_up", duration, "Run the slots missed this far back after downtime."),
    ("max_attempts", lambda t, o: int(t), "Attempts per run."),
    ("stale_after", duration, "Skip a run not started this long after its slot."),
    ("jitter", duration, "Start each slot up to this late (hashed, the same everywhere)."),
    ("options", _json_value, "The host's publish options as a JSON object."),
    ("description", lambda t, o: t, "What it is for."),
    (
        "expect_success_within",
        lambda t, o: False if t.lower() == "off" else duration(t, o),
        "Overdue when a slot has not succeeded this long after its time; off: never.",
    ),
    ("alert_after_failures", lambda t, o: int(t), "Failing after this many slots in a row fail."),
]


def _definition_options(command: F) -> F:
    for name, _, text in reversed(_FIELDS):
        command = click.option(f"--{name.replace('_', '-')}", name, default=None, help=text)(
            command
        )
    return command


def _values(given: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line, converted."""
    converters = {name: convert for name, convert, _ in _FIELDS}
    return {
        name: converters[name](text, f"--{name.replace('_', '-')}")
        for name, text in given.items()
        if name in converters and text is not None
    }


@click.group()
def schedules() -> None:
    """Stored schedules: changed at runtime, seen by every instance at its next tick.

    \b
    Example:
      relay schedules list --backend sqlite:///relay.db
    """


@schedules.command("list")
@backend_option
@json_option("One JSON object per schedule.")
def list_(url: str, as_json: bool) -> None:
    """Every stored schedule: task, when, version, last change, and where it can run.

    \b
    Example:
      relay schedules list --backend sqlite:///relay.db --json
    """
    with _control(url, read_only=True) as control:
        found = control.schedules()
        allowed = control.allowed_tasks()
    if as_json:
        for schedule in found:
            click.echo(json.dumps(_json(schedule)))
        return
    Console(width=None if not piped() else 400).print(_table(found, allowed))


@schedules.command()
@backend_option
@click.argument("name")
@json_option("Print JSON.")
def show(url: str, name: str, as_json: bool) -> None:
    """One stored schedule, every field.

    \b
    Example:
      relay schedules show report --backend sqlite:///relay.db
    """
    with _control(url, read_only=True) as control:
        schedule = control.schedule(name)
    values = _json(schedule)
    if as_json:
        click.echo(json.dumps(values, indent=2))
        return
    for key, value in values.items():
        click.echo(f"{key:>13}: {value}")


@schedules.command()
@backend_option
@click.argument("name")
@click.argument("task")
@_definition_options
@click.option("--disabled", is_flag=True, help="Store it paused.")
@click.option("--by", default=None, help="Who makes the change (default: user@host).")
@click.option("--force", is_flag=True, help="Store it even if no live instance allows TASK.")
def add(url: str, name: str, task: str, disabled: bool, by: str | None, force: bool,
        **given: Any) -> None:  # fmt: skip
    """Store schedule NAME running TASK: from its first slot after now, on every instance.

    \b
    Example:
      relay schedules add report app.tasks.report \\
        --backend sqlite:///relay.db --cron "0 6 * * *" --tz Europe/Paris
    """
    with _control(url) as control:
        added = control.add_schedule(
            name, task, enabled=not disabled, by=by, force=force, **_values(given)
        )
    click.echo(f"added {added.name} (version {added.version})")


@schedules.command()
@backend_option
@click.argument("name")
@click.option("--version", "version", type=int, required=True, help="The version you edit.")
@_definition_options
@click.option("--task", default=None, help="Run another task.")
@click.option("--enable/--disable", "enabled", default=None, help="Resume or pause it.")
@click.option("--by", default=None, help="Who makes the change (default: user@host).")
@click.option("--force", is_flag=True, help="Change the task even if no live instance allows it.")
def edit(url: str, name: str, version: int, task: str | None, enabled: bool | None,
         by: str | None, force: bool, **given: Any) -> None:  # fmt: skip
    """Change schedule NAME if it is still at --version (else: who changed it, and when).

    \b
    Example:
      relay schedules edit report --backend sqlite:///relay.db --version 3 --every 15m
    """
    changes = _values(given)
    if task is not None:
        changes["task"] = task
    if enabled is not None:
        changes["enabled"] = enabled
    with _control(url) as control:
        changed = control.update_schedule(name, version=version, by=by, force=force, **changes)
    click.echo(f"{changed.name} is at version {changed.version}")


@schedules.command("rm")
@backend_option
@click.argument("name")
@click.option("--version", "version", type=int, default=None, help="Only if at this version.")
@click.option("--by", default=None, help="Who makes the change (default: user@host).")
def rm(url: str, name: str, version: int | None, by: str | None) -> None:
    """Remove schedule NAME: no new slot starts; its history and runs stay.

    \b
    Example:
      relay schedules rm report --backend sqlite:///relay.db --version 4
    """
    with _control(url) as control:
        control.remove_schedule(name, version=version, by=by)
    click.echo(f"removed {name}")


@schedules.command()
@backend_option
@click.argument("name")
@json_option("One JSON object per change.")
def history(url: str, name: str, as_json: bool) -> None:
    """Every change of schedule NAME: version, when (the store's clock), by whom, what.

    \b
    Example:
      relay schedules history report --backend sqlite:///relay.db
    """
    with _control(url, read_only=True) as control:
        changes = control.schedule_history(name)
    for change in changes:
        click.echo(json.dumps(_change_json(change)) if as_json else _change_line(change))


@schedules.command()
@backend_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def export(url: str, file: Path) -> None:
    """Write every stored schedule to FILE (YAML for .yaml/.yml, else JSON), for `apply`.

    \b
    Example:
      relay schedules export schedules.yaml --backend sqlite:///relay.db
    """
    with _control(url, read_only=True) as control:
        text = export_text(control.schedules(), file)
    file.write_text(text)
    click.echo(f"wrote {file}")


@schedules.command("apply")
@backend_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--prune", is_flag=True, help="Remove the stored schedules FILE does not name.")
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.option("--by", default=None, help="Who makes the changes (default: user@host).")
@click.option("--force", is_flag=True, help="Store tasks no live instance allows.")
def apply_(url: str, file: Path, prune: bool, dry_run: bool, by: str | None,
           force: bool) -> None:  # fmt: skip
    """Make the store hold the schedules of FILE (idempotent: a second apply changes nothing).

    All or nothing: every entry is checked first (a refusal names its position and name), then
    every change is written in one atomic step.

    \b
    Example:
      relay schedules apply schedules.yaml --backend sqlite:///relay.db --prune --dry-run
    """
    with _control(url, read_only=dry_run) as control:
        steps = plan(control, load(file), prune=prune)
        lines = steps.summary()
        if dry_run:
            check(control, steps, force=force)
        else:
            apply_plan(control, steps, by=by, force=force)
    for line in lines or ["nothing to change"]:
        click.echo(("would " if dry_run else "") + line)


def _json(schedule: Schedule) -> dict[str, Any]:
    values: dict[str, Any] = {"name": schedule.name, **to_definition(schedule)}
    values.update(version=schedule.version, updated_by=schedule.updated_by)
    for key in ("updated_at", "created_at"):
        at = getattr(schedule, key)
        values[key] = None if at is None else at.isoformat()
    return values


def _table(found: list[Schedule], allowed: dict[str, tuple[str, ...]]) -> Table:
    table = Table(title="Stored schedules")
    for column in ("name", "task", "when", "state", "version", "changed", "runnable on"):
        table.add_column(column)
    for s in found:
        hosts = sum(1 for tasks in allowed.values() if s.task in tasks)
        where = f"{hosts} live instance(s)" if hosts else "no live instance allows its task"
        limits = [f"max {s.max_runs} runs" if s.max_runs else "", f"ends {s.end:%Y-%m-%d %H:%M}"
                  if s.end else ""]  # fmt: skip
        state = ", ".join(x for x in ["enabled" if s.enabled else "paused", *limits] if x)
        changed = f"{s.updated_at:%Y-%m-%d %H:%M:%S} by {s.updated_by}" if s.updated_at else ""
        table.add_row(s.name, s.task, describe(s), state, str(s.version), changed, where)
    return table


def _change_json(change: ScheduleChange) -> dict[str, Any]:
    return {"version": change.version, "at": change.at.isoformat(), "by": change.by,
            "action": change.action, "changes": dict(change.changes)}  # fmt: skip


def _change_line(change: ScheduleChange) -> str:
    what = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in sorted(change.changes.items()))
    when = change.at.isoformat(timespec="seconds")
    return f"v{change.version} {change.action} {when} by {change.by}: {what}"
