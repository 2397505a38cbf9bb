"""An example Django project whose periodic Celery tasks are scheduled by Relay."""

from project.celery import app as celery_app

__all__ = ["celery_app"]
