"""The console's stored schedules: the list, add, edit, enable, disable, remove, history.

Every change goes through :class:`relay.Control` (its checks, its atomic version compare) with
the viewer as ``by``. An edit, enable, disable or removal names the version the page showed: when
someone else changed the schedule first, nothing is written and the page says who, when, and at
which version it now is (:class:`relay.errors.Conflict`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from relay.console import forms
from relay.console.actions import forms_path
from relay.console.app import Console
from relay.control import Control
from relay.control_schedules import describe
from relay.errors import Conflict, RelayError
from relay.stored import Schedule

__all__ = ["add", "disable", "edit", "enable", "history", "listing", "remove"]

OVERLAPS = ("allow", "skip", "buffer_one")


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


async def listing(request: Request) -> Response:
    """Every stored schedule: task, when, enabled, version, last change."""
    console = _console(request)
    viewer = console.viewer(request)
    rows: list[tuple[Schedule, str]] = []
    error = ""
    try:
        found = await console.read(lambda c: c.schedules())
        rows = [(s, describe(s)) for s in found]
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "schedules.html", fragment="schedules_table.html", viewer=viewer, rows=rows,
        error=error,
    )  # fmt: skip


async def add(request: Request) -> Response:
    """The form of a new stored schedule, and its POST (``Control.add_schedule``)."""
    console = _console(request)
    if request.method != "POST":
        viewer = console.viewer(request, write=True)
        return _form_page(console, request, forms.schedule_form(None), None, viewer)
    form = await forms.read_form(request)
    viewer = await console.change(request, form.data.get("csrf"))
    name = form.get("name")
    values = forms.schedule_values(form)
    if not name:
        form.error("name", "Missing argument 'NAME': name the schedule")
    if form.ok:
        force = form.get("force") == "on"
        try:
            added = await console.write(
                lambda c: c.add_schedule(name, by=viewer.by, force=force, **values)
            )
        except Conflict as exc:
            form.error("name", str(exc))
        except RelayError as exc:
            form.error("", str(exc))
        else:
            line = f"Added {added.name} (version {added.version})."
            return console.done(request, "/schedules", ("success", line))
    return _form_page(console, request, form, None, viewer, status=400)


async def edit(request: Request) -> Response:
    """A stored schedule's form, and its POST: saved only if still at the version shown."""
    console = _console(request)
    name = request.path_params["name"]
    if request.method != "POST":
        viewer = console.viewer(request, write=True)
        current, error = await _read(console, name)
        if current is None:
            return console.done(request, "/schedules", ("error", error))
        return _form_page(console, request, forms.schedule_form(current), current, viewer)
    form = await forms.read_form(request)
    viewer = await console.change(request, form.data.get("csrf"))
    form.data["name"] = name
    values = forms.schedule_values(form)
    version = _version(form)
    conflict = False
    if form.ok and version is not None:
        force = form.get("force") == "on"
        try:
            changed = await console.write(
                lambda c: c.update_schedule(name, version=version, by=viewer.by, force=force,
                                            **values)
            )  # fmt: skip
        except Conflict as exc:
            conflict = True
            form.error("", f"Not saved: {exc}. Reload the schedule to see that change.")
        except RelayError as exc:
            form.error("", str(exc))
        else:
            same = changed.version == version
            done = "nothing changed" if same else f"now at version {changed.version}"
            return console.done(request, "/schedules", ("success", f"Saved {name}: {done}."))
    current, _ = await _read(console, name)
    return _form_page(console, request, form, current, viewer, status=409 if conflict else 400)


async def enable(request: Request) -> Response:
    """Enable a stored schedule, if still at the version the list showed."""
    return await _toggle(request, True)


async def disable(request: Request) -> Response:
    """Disable a stored schedule, if still at the version the list showed."""
    return await _toggle(request, False)


async def _toggle(request: Request, enabled: bool) -> Response:
    console = _console(request)
    form = await forms.read_form(request)
    viewer = await console.change(request, form.data.get("csrf"))
    name = request.path_params["name"]
    version = _version(form)
    if version is None:
        return console.done(request, "/schedules", ("error", form.errors["version"]))
    try:
        changed = await console.write(
            lambda c: c.update_schedule(name, version=version, by=viewer.by, enabled=enabled)
        )
    except RelayError as exc:
        return console.done(request, "/schedules", ("error", f"Could not change {name}: {exc}"))
    line = f"{'Enabled' if enabled else 'Disabled'} {name} (version {changed.version})."
    return console.done(request, "/schedules", ("success", line))


async def remove(request: Request) -> Response:
    """Ask, then remove a stored schedule if still at the version shown: its history stays."""
    console = _console(request)
    name = request.path_params["name"]
    if request.method != "POST":
        viewer = console.viewer(request, write=True)
        current, error = await _read(console, name)
        return console.render(
            request, "schedule_remove.html", viewer=viewer, name=name, schedule=current,
            error=error,
        )  # fmt: skip
    form = await forms.read_form(request)
    viewer = await console.change(request, form.data.get("csrf"))
    version = _version(form)
    if version is None:
        return console.done(request, "/schedules", ("error", form.errors["version"]))
    try:
        await console.write(lambda c: c.remove_schedule(name, version=version, by=viewer.by))
    except RelayError as exc:
        return console.done(request, "/schedules", ("error", f"Could not remove {name}: {exc}"))
    return console.done(request, "/schedules", ("success", f"Removed {name}; its history stays."))


async def history(request: Request) -> Response:
    """Every change of a stored schedule, newest first: version, when, by whom, what."""
    console = _console(request)
    viewer = console.viewer(request)
    name = request.path_params["name"]
    changes: list[tuple[Any, list[tuple[str, str, str]]]] = []
    error = ""
    try:
        found = await console.read(lambda c: c.schedule_history(name))
        changes = [
            (change, [(f, _shown(old), _shown(new)) for f, (old, new) in change.changes.items()])
            for change in reversed(found)
        ]
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "schedule_history.html", viewer=viewer, name=name, changes=changes,
        error=error,
    )  # fmt: skip


async def _read(console: Console, name: str) -> tuple[Schedule | None, str]:
    try:
        return await console.read(lambda c: Control.schedule(c, name)), ""
    except RelayError as exc:
        return None, str(exc)


def _version(form: forms.Form) -> int | None:
    try:
        return int(form.get("version"))
    except ValueError:
        form.error("version", "a change of a stored schedule names its version (--version)")
        return None


def _form_page(
    console: Console,
    request: Request,
    form: forms.Form,
    current: Schedule | None,
    viewer: Any,
    status: int = 200,
) -> Response:
    title = f"Change {current.name}" if current else "Add a stored schedule"
    path = f"/schedule/edit/{forms_path(current.name)}" if current else "/schedules/add"
    return console.render(
        request, "schedule_form.html", viewer=viewer, form=form, schedule=current,
        heading=title, action=path, overlaps=OVERLAPS, status=status,
    )  # fmt: skip


def _shown(value: Any) -> str:
    return "" if value is None else json.dumps(value)
