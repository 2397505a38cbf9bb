"""What Relay's admin pages share: a model admin whose pages read Relay's store, and who makes a
change, as the store records it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

__all__ = ["StoreAdmin", "changed_by"]


class StoreAdmin(admin.ModelAdmin):
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


def changed_by(request: HttpRequest) -> str:
    """Who makes a change in the admin, as the store records it."""
    return f"{request.user.get_username()} (Django admin)"
