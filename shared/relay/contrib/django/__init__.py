"""Relay's Django app: add ``"relay.contrib.django"`` to ``INSTALLED_APPS``.

* **System checks**: ``manage.py check`` reports bad ``RELAY`` / ``CELERY_RELAY_*`` settings with
  Relay's own messages, and a store it cannot reach as a warning (:mod:`.checks`).
* ``RELAY = {"BACKEND": "django"}``: Relay's store in the project's database, ``DATABASES
  ["default"]`` on PostgreSQL (schema ``relay``) or SQLite, through Relay's own backend and schema,
  not Django models (:mod:`.database`).
* **Management commands**: ``relay_dramatiq`` (the Dramatiq scheduler, set up for Django),
  ``relay_runs``, ``relay_jobs``, ``relay_timeline``, ``relay_pause``, ``relay_resume``,
  ``relay_trigger``.
* **Admin pages** for jobs, runs and their timeline, read through Relay's API so they work on
  every lease backend; pause, resume and trigger as admin actions for users with the
  ``relay.control_job`` permission (:mod:`.admin`).

See ``docs/django.md``.
"""
