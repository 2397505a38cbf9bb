"""An example Django project whose periodic tasks (Celery or Dramatiq) are scheduled by Relay."""

import importlib.util

# The usual Celery set-up for Django, when Celery is installed (the Dramatiq variant needs none).
if importlib.util.find_spec("celery") is not None:
    from project.celery import app as celery_app

    __all__ = ["celery_app"]
