"""The admin pages of stored schedules: a list with each one's state, add, edit, enable, disable,
delete, and each one's history.

Viewing needs ``relay.view_schedule``, changing ``relay.change_schedule``. Every change is a POST
with Django's CSRF token, made through :class:`relay.Control` (so with its checks) with the admin
user as ``by``; an edit, enable, disable or delete names the version it was based on, and a stale
one is refused with who changed the schedule and when (:class:`relay.errors.Conflict`).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import URLPattern, path

from relay.contrib.django.admin_base import StoreAdmin, changed_by
from relay.contrib.django.forms import ScheduleForm
from relay.contrib.django.models import Schedule
from relay.contrib.django.store import backend_url, read_store, schedule_rows
from relay.control import Control
from relay.errors import Conflict, RelayError, UnknownSchedule
from relay.stored import Schedule as StoredSchedule

__all__ = ["SCHEDULE_PERMISSION", "ScheduleAdmin"]

SCHEDULE_PERMISSION = "relay.change_schedule"
"""The permission adding, editing, enabling, disabling and deleting stored schedules needs."""


@admin.register(Schedule)
class ScheduleAdmin(StoreAdmin):
    """Stored schedules: listed with their state, each one's history; added, edited, enabled,
    disabled and deleted through :class:`relay.Control` by users with ``relay.change_schedule``."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(SCHEDULE_PERMISSION))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm(SCHEDULE_PERMISSION))

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name="relay_schedule_changelist"),
            path("add/", view(self.add_schedule_view), name="relay_schedule_add"),
            path("<path:name>/change/", view(self.edit_view), name="relay_schedule_change"),
            path("<path:name>/delete/", view(self.remove_view), name="relay_schedule_delete"),
            path("<path:name>/history/", view(self.changes_view), name="relay_schedule_history"),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.store_page(
            request,
            "relay/admin/schedules.html",
            schedule_rows,
            self.toggle,
            title="Relay stored schedules",
            can_change=self.has_change_permission(request),
        )

    def toggle(self, request: HttpRequest) -> HttpResponse:
        """Enable or disable one schedule, if it is still at the version the page showed."""
        self.require_change(request)
        name, enabled = request.POST.get("name", ""), request.POST.get("enabled") == "1"
        try:
            with Control(backend_url()) as relay:
                changed = relay.update_schedule(
                    name, version=_version(request), by=changed_by(request), enabled=enabled
                )
        except RelayError as exc:
            messages.error(request, f"Could not change {name}: {exc}")
        else:
            done = "Enabled" if enabled else "Disabled"
            messages.success(request, f"{done} {name} (version {changed.version}).")
        return HttpResponseRedirect(request.path)

    def add_schedule_view(self, request: HttpRequest) -> HttpResponse:
        """Add a stored schedule, with the checks of ``Control.add_schedule``."""
        self.require_change(request)
        form = ScheduleForm(request.POST if request.method == "POST" else None)
        if form.is_bound and form.is_valid():
            data = form.cleaned_data
            try:
                with Control(backend_url()) as relay:
                    added = relay.add_schedule(
                        data["name"],
                        by=changed_by(request),
                        force=data["force"],
                        **form.definition(),
                    )
            except Conflict as exc:  # the name is taken
                form.add_error("name", str(exc))
            except RelayError as exc:
                form.add_relay_error(exc)
            else:
                messages.success(request, f"Added {added.name} (version {added.version}).")
                return redirect("admin:relay_schedule_changelist")
        return self.page(
            request, "relay/admin/schedule_form.html", title="Add a stored schedule", form=form
        )

    def edit_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Change a stored schedule if it is still at the version the form was made from."""
        self.require_change(request)
        current = _read(request, name)
        if current is None:
            return redirect("admin:relay_schedule_changelist")
        form = ScheduleForm(
            request.POST if request.method == "POST" else None,
            initial=ScheduleForm.initial_of(current), editing=True,
        )  # fmt: skip
        if form.is_bound and form.is_valid():
            data = form.cleaned_data
            try:
                with Control(backend_url()) as relay:
                    changed = relay.update_schedule(
                        name, version=data["version"], by=changed_by(request), force=data["force"],
                        **form.definition(),
                    )  # fmt: skip
            except Conflict as exc:
                form.add_error(None, f"Not saved: {exc}.")
                return self.page(
                    request, "relay/admin/schedule_form.html", title=f"Change {name}",
                    form=form, schedule=current, conflict=True,
                )  # fmt: skip
            except RelayError as exc:
                form.add_relay_error(exc)
            else:
                same = changed.version == data["version"]
                done = "nothing changed" if same else f"now at version {changed.version}"
                messages.success(request, f"Saved {name}: {done}.")
                return redirect("admin:relay_schedule_changelist")
        return self.page(
            request, "relay/admin/schedule_form.html", title=f"Change {name}", form=form,
            schedule=current,
        )  # fmt: skip

    def remove_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Ask, then remove a stored schedule (if still at the version shown): its history and
        runs stay."""
        self.require_change(request)
        if request.method != "POST":
            current = _read(request, name)
            if current is None:
                return redirect("admin:relay_schedule_changelist")
            return self.page(
                request, "relay/admin/schedule_delete.html", title=f"Delete {name}",
                schedule=current,
            )  # fmt: skip
        try:
            with Control(backend_url()) as relay:
                relay.remove_schedule(name, version=_version(request), by=changed_by(request))
        except RelayError as exc:
            messages.error(request, f"Could not delete {name}: {exc}")
        else:
            messages.success(request, f"Deleted {name}; its history stays.")
        return redirect("admin:relay_schedule_changelist")

    def changes_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Every change of a stored schedule: version, when, by whom, what changed."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        history, error = [], ""
        try:
            with read_store() as backend:
                history = Control(backend).schedule_history(name)
        except UnknownSchedule as exc:
            raise Http404(str(exc)) from exc
        except RelayError as exc:
            error = str(exc)
        changes = [
            (
                change,
                [(field, _shown(old), _shown(new)) for field, (old, new) in change.changes.items()],
            )
            for change in reversed(history)
        ]
        return self.page(
            request, "relay/admin/schedule_history.html", title=f"History of {name}", name=name,
            changes=changes, error=error, can_change=self.has_change_permission(request),
        )  # fmt: skip

    def require_change(self, request: HttpRequest) -> None:
        """Refuse (403) a user without ``relay.change_schedule``."""
        if not self.has_change_permission(request):
            raise PermissionDenied


def _version(request: HttpRequest) -> int:
    """The version a POST says it changes (a change without one is refused)."""
    try:
        return int(request.POST.get("version", ""))
    except ValueError:
        raise PermissionDenied("a change of a stored schedule names its version") from None


def _read(request: HttpRequest, name: str) -> StoredSchedule | None:
    """Stored schedule ``name`` (404 if there is none); ``None``, with the error as a message,
    if the store cannot be read."""
    try:
        with read_store() as backend:
            return Control(backend).schedule(name)
    except UnknownSchedule as exc:
        raise Http404(str(exc)) from exc
    except RelayError as exc:
        messages.error(request, f"Could not read {name}: {exc}")
        return None


def _shown(value: Any) -> str:
    return "" if value is None else json.dumps(value)
