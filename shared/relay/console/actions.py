"""The console's actions on a job: pause (with a reason), resume, trigger now, backfill a range.

Each is a POST from the job's page, with the session's CSRF token, made by a viewer allowed to
write, through :class:`relay.Control` (so with its checks), recording the viewer as ``by``. Input
is read with the ``relay`` command's parsers; a bad value, or a change Control refuses, is shown
on the job's page with the command's words, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from relay.console import forms
from relay.console.app import Console
from relay.console.pages import job
from relay.control import Control
from relay.errors import RelayError

__all__ = ["act"]

T = TypeVar("T")
ACTIONS = ("pause", "resume", "trigger", "backfill")


async def act(request: Request) -> Response:
    """Apply the action the URL names to the job it names."""
    console: Console = request.app.state.console
    form = await forms.read_form(request)
    viewer = await console.change(request, form.data.get("csrf"))
    action, name = request.path_params["action"], request.path_params["name"]
    form.data["action"] = action
    to = f"/jobs/{forms_path(name)}"
    if action == "pause":
        reason = form.get("reason")
        done = await _write(console, form, lambda c: c.pause(name, reason, by=viewer.by))
        if form.ok:
            line = f"Paused {name}." if done else f"{name} was already paused."
            return console.done(request, to, ("success", line))
    elif action == "resume":
        missed = form.get("missed", "skip")
        window = forms.seconds(form, "window", "--window")
        if form.ok:
            back = await _write(
                console, form,
                lambda c: c.resume(name, missed="catch_up" if missed == "catch_up" else "skip",
                                   window=window),
            )  # fmt: skip
            if form.ok:
                more = f"; {len(back)} missed run(s) to catch up" if back else ""
                return console.done(request, to, ("success", f"Resumed {name}{more}."))
    elif action == "trigger":
        skip = form.get("overlap") == "skip"
        record = await _write(
            console, form, lambda c: c.trigger(name, overlap="skip" if skip else "allow")
        )
        if form.ok and record is not None:
            line = f"Triggered {name}: {record.id} ({record.state.value})."
            return console.done(request, to, ("success", line))
    elif action == "backfill":
        start = forms.when(form, "start", "--start")
        end = forms.when(form, "end", "--end")
        for field, value in (("start", start), ("end", end)):
            if value is None and not form.get(field):
                form.error(field, f"Missing option '--{field}'.")
        serial = form.get("overlap") == "buffer_all"
        if form.ok and start is not None and end is not None:
            made = await _write(
                console, form,
                lambda c: c.backfill(name, start, end,
                                     overlap="buffer_all" if serial else "allow"),
            )  # fmt: skip
            if form.ok and made is not None:
                new = sum(1 for _, created in made if created)
                had = len(made) - new
                line = f"Backfilled {name}: {new} runs created, {had} slots already had a run."
                return console.done(request, to, ("success", line))
    else:
        form.error("", f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
    return await job(request, form=form, status=400)


async def _write(console: Console, form: forms.Form, call: Callable[[Control], T]) -> T | None:
    """``call(control)`` on the writable store; a Relay error goes on the form instead."""
    try:
        return await console.write(call)
    except RelayError as exc:
        form.error("", str(exc))
        return None


def forms_path(name: str) -> str:
    """``name`` as one part of a URL path."""
    from urllib.parse import quote

    return quote(name, safe="")
