"""The test site with django-celery-beat installed, for ``manage.py relay_import_celery_beat``."""

from tests.django_app.site.settings import *  # noqa: F403
from tests.django_app.site.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
