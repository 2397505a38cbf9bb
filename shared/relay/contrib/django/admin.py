"""Relay's pages in the Django admin: jobs, runs and their timeline, and stored schedules.

Nothing is read through Django models: each page opens the store read-only through the lease
contract, so the pages work on every lease backend. The pages need the ``relay.view_job`` /
``relay.view_run`` / ``relay.view_schedule`` permission (staff only, as every admin page); the
actions on the jobs page (pause, resume, trigger) need ``relay.control_job``, and adding, editing,
enabling, disabling and deleting stored schedules ``relay.change_schedule``. Every change is a
POST form with Django's CSRF token, made through :class:`relay.Control` with the admin user as
``by``.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.safestring import mark_safe

from relay import timeline
from relay.contrib.django import control
from relay.contrib.django.forms import ScheduleForm
from relay.contrib.django.models import Job, Run, Schedule
from relay.contrib.django.store import backend_url, job_rows, read_store, schedule_rows
from relay.control import Control
from relay.errors import Conflict, RelayError, UnknownSchedule
from relay.runs import RunState
from relay.stored import Schedule as StoredSchedule

__all__ = ["CONTROL_PERMISSION", "SCHEDULE_PERMISSION", "JobAdmin", "RunAdmin", "ScheduleAdmin"]

CONTROL_PERMISSION = "relay.control_job"
"""The permission the admin actions need."""
SCHEDULE_PERMISSION = "relay.change_schedule"
"""The permission adding, editing, enabling, disabling and deleting stored schedules needs."""
RUNS_SHOWN = 200


class _StoreAdmin(admin.ModelAdmin):
    """A model admin with one page, read from Relay's store: nothing to add, change or delete."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def page(self, request: HttpRequest, template: str, **context: Any) -> TemplateResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {**self.admin_site.each_context(request), "opts": self.opts, **context}
        return TemplateResponse(request, template, context)


@admin.register(Job)
class JobAdmin(_StoreAdmin):
    """Every job with its latest and live runs; pause, resume and trigger for permitted users."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self.act(request)
        rows, store, error = [], "", ""
        try:
            with read_store() as backend:
                rows, store = job_rows(backend), backend.name
        except RelayError as exc:
            error = str(exc)
        return self.page(
            request, "relay/admin/jobs.html", title="Relay jobs", rows=rows, store=store,
            error=error, actions=control.ACTIONS,
            can_control=request.user.has_perm(CONTROL_PERMISSION),
        )  # fmt: skip

    def act(self, request: HttpRequest) -> HttpResponse:
        """Apply the chosen action to the chosen jobs, then show the page again."""
        if not request.user.has_perm(CONTROL_PERMISSION):
            raise PermissionDenied
        action = request.POST.get("action", "")
        jobs = request.POST.getlist("_selected_action")
        if not jobs or action not in control.ACTIONS:
            messages.warning(request, "Choose one or more jobs and an action.")
            return HttpResponseRedirect(request.path)
        try:
            done = control.apply(
                action, jobs, by=_by(request), reason=request.POST.get("reason", "")
            )
        except RelayError as exc:
            messages.error(request, f"{action} failed: {exc}")
        else:
            for line in done:
                messages.success(request, line)
        return HttpResponseRedirect(request.path)


@admin.register(Run)
class RunAdmin(_StoreAdmin):
    """The latest runs, filtered by job and state, and the timeline of runs."""

    def get_urls(self) -> list[URLPattern]:
        timeline_view = self.admin_site.admin_view(self.timeline_view)
        return [path("timeline/", timeline_view, name="relay_run_timeline"), *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        job = request.GET.get("job") or None
        state = request.GET.get("state") or None
        runs, jobs, store, error = [], [], "", ""
        try:
            with read_store() as backend:
                store = backend.name
                jobs = [row.name for row in job_rows(backend)]
                runs = [r for r in backend.runs(job, RUNS_SHOWN) if not state or r.state == state]
        except RelayError as exc:
            error = str(exc)
        return self.page(
            request, "relay/admin/runs.html", title="Relay runs", runs=runs, jobs=jobs,
            job=job or "", state=state or "", states=[s.value for s in RunState], store=store,
            error=error, shown=RUNS_SHOWN,
        )  # fmt: skip

    def timeline_view(self, request: HttpRequest) -> HttpResponse:
        """The same timeline as ``relay timeline``, for the chosen jobs and period."""
        chosen = [j for j in request.GET.getlist("job") if j]
        since = request.GET.get("since", "").strip()
        drawing, summary, jobs, error = "", "", [], ""
        try:
            with read_store() as backend:
                jobs = [row.name for row in job_rows(backend)]
                start = timeline.parse_since(since, backend.now()) if since else None
                drawn = timeline.read(backend, chosen, start, limit=10_000)
            drawing, summary = timeline.render_svg(drawn), timeline.summary(drawn)
        except RelayError as exc:
            error = str(exc)
        return self.page(
            request, "relay/admin/timeline.html", title="Relay timeline", jobs=jobs,
            chosen=chosen, since=since, error=error, summary=summary,
            style=mark_safe(timeline.STYLE),  # Relay's own constant
            drawing=mark_safe(drawing),  # every value in it is escaped
        )  # fmt: skip


@admin.register(Schedule)
class ScheduleAdmin(_StoreAdmin):
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
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self.toggle(request)
        rows, store, error = [], "", ""
        try:
            with read_store() as backend:
                rows, store = schedule_rows(backend), backend.name
        except RelayError as exc:
            error = str(exc)
        return self.page(
            request, "relay/admin/schedules.html", title="Relay stored schedules", rows=rows,
            store=store, error=error, can_change=self.has_change_permission(request),
        )  # fmt: skip

    def toggle(self, request: HttpRequest) -> HttpResponse:
        """Enable or disable one schedule, if it is still at the version the page showed."""
        self.require_change(request)
        name, enabled = request.POST.get("name", ""), request.POST.get("enabled") == "1"
        try:
            with Control(backend_url()) as relay:
                changed = relay.update_schedule(
                    name, version=_version(request), by=_by(request), enabled=enabled
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
                        data["name"], by=_by(request), force=data["force"], **form.definition()
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
                        name, version=data["version"], by=_by(request), force=data["force"],
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
                relay.remove_schedule(name, version=_version(request), by=_by(request))
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


def _by(request: HttpRequest) -> str:
    """Who makes a change in the admin, as the store records it."""
    return f"{request.user.get_username()} (Django admin)"


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
