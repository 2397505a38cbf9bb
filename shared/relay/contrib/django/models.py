"""No data lives in Django models: runs and jobs are read from Relay's store through its API.

These unmanaged models have no table. They exist so that the admin lists Relay's pages and so
that permissions can be granted: ``relay.view_job``, ``relay.view_run`` (see the pages),
``relay.control_job`` (pause, resume and trigger jobs), ``relay.view_schedule`` and
``relay.change_schedule`` (add, edit, enable, disable and delete stored schedules).
"""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    """A job in Relay's store (no table: the admin reads the store)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = (("control_job", "Can pause, resume and trigger Relay jobs"),)
        verbose_name = "job"


class Run(models.Model):
    """A run in Relay's store (no table: the admin reads the store)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        verbose_name = "run"


class Timeline(Run):
    """The timeline of runs: a proxy of :class:`Run`, with no permission of its own, so that the
    admin index lists the timeline page beside the others (``relay.view_run`` shows it)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "timeline"
        verbose_name_plural = "timeline"


class Schedule(models.Model):
    """A stored schedule in Relay's store (no table: the admin reads and changes it through
    :class:`relay.Control`)."""

    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "stored schedule"
