"""Relay's pages in the Django admin: jobs, runs and their timeline, and stored schedules.

Nothing is read through Django models: each page opens the store read-only through the lease
contract, so the pages work on every lease backend. The pages need the ``relay.view_job`` /
``relay.view_run`` / ``relay.view_schedule`` permission (staff only, as every admin page); the
actions on the jobs page (pause, resume, trigger) need ``relay.control_job``, and adding, editing,
enabling, disabling and deleting stored schedules ``relay.change_schedule``
(:mod:`relay.contrib.django.admin_schedules`). Every change is a POST form with Django's CSRF
token, made through :class:`relay.Control` with the admin user as ``by``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.safestring import mark_safe

from relay import timeline
from relay.contrib.django import control
from relay.contrib.django.admin_base import StoreAdmin, changed_by
from relay.contrib.django.admin_schedules import SCHEDULE_PERMISSION, ScheduleAdmin
from relay.contrib.django.models import Job, Run, Timeline
from relay.contrib.django.store import job_rows, read_store
from relay.errors import RelayError
from relay.runs import RunState

__all__ = [
    "CONTROL_PERMISSION",
    "SCHEDULE_PERMISSION",
    "JobAdmin",
    "RunAdmin",
    "ScheduleAdmin",
    "TimelineAdmin",
]

CONTROL_PERMISSION = "relay.control_job"
"""The permission the admin actions need."""
RUNS_SHOWN = 200


@admin.register(Job)
class JobAdmin(StoreAdmin):
    """Every job with its latest and live runs; pause, resume and trigger for permitted users."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.store_page(
            request,
            "relay/admin/jobs.html",
            job_rows,
            self.act,
            title="Relay jobs",
            actions=control.ACTIONS,
            can_control=request.user.has_perm(CONTROL_PERMISSION),
        )

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
                action, jobs, by=changed_by(request), reason=request.POST.get("reason", "")
            )
        except RelayError as exc:
            messages.error(request, f"{action} failed: {exc}")
        else:
            for line in done:
                messages.success(request, line)
        return HttpResponseRedirect(request.path)


@admin.register(Run)
class RunAdmin(StoreAdmin):
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


@admin.register(Timeline)
class TimelineAdmin(StoreAdmin):
    """The admin index's link to the timeline of runs (the page itself is :class:`RunAdmin`'s),
    shown to those who may view runs."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("relay.view_run"))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:relay_run_timeline"))
