"""Every address of the console, and what answers it."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from relay.console import actions, pages, schedules

__all__ = ["ROUTES"]

ROUTES: list[BaseRoute] = [
    Route("/", pages.jobs, name="jobs"),
    Route("/jobs/{name:path}", pages.job, name="job"),
    Route("/act/{action}/{name:path}", actions.act, methods=["POST"], name="act"),
    Route("/runs", pages.runs, name="runs"),
    Route("/run/{id:path}", pages.run, name="run"),
    Route("/instances", pages.instances, name="instances"),
    Route("/timeline", pages.timeline_page, name="timeline"),
    Route("/schedules", schedules.listing, name="schedules"),
    Route("/schedules/add", schedules.add, methods=["GET", "POST"], name="schedule_add"),
    Route("/schedule/edit/{name:path}", schedules.edit, methods=["GET", "POST"]),
    Route("/schedule/enable/{name:path}", schedules.enable, methods=["POST"]),
    Route("/schedule/disable/{name:path}", schedules.disable, methods=["POST"]),
    Route("/schedule/remove/{name:path}", schedules.remove, methods=["GET", "POST"]),
    Route("/schedule/history/{name:path}", schedules.history, name="schedule_history"),
]
"""The pages, the job actions and the stored schedules' pages."""
