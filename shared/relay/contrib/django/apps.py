"""The app's configuration: ``INSTALLED_APPS = [..., "relay.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig


class RelayConfig(AppConfig):
    """Relay in a Django project: checks, commands, admin pages; label ``relay``."""

    name = "relay.contrib.django"
    label = "relay"
    verbose_name = "Relay"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from relay.contrib.django import checks  # noqa: F401 (registers the system checks)
