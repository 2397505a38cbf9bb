"""What Relay's admin pages share: a model admin whose pages read Relay's store, and who makes a
change, as the store records it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from relay.contract import LeaseBackend
from relay.contrib.django.store import read_store
from relay.errors import RelayError

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

    def store_page(
        self,
        request: HttpRequest,
        template: str,
        read: Callable[[LeaseBackend], list[Any]],
        on_post: Callable[[HttpRequest], HttpResponse],
        **context: Any,
    ) -> HttpResponse:
        """A list page: the rows ``read`` finds in the store, opened read-only (or the store's
        error, shown on the page); a POST goes to ``on_post``, the page's own forms."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return on_post(request)
        rows: list[Any] = []
        store = error = ""
        try:
            with read_store() as backend:
                rows, store = read(backend), backend.name
        except RelayError as exc:
            error = str(exc)
        return self.page(request, template, rows=rows, store=store, error=error, **context)


def changed_by(request: HttpRequest) -> str:
    """Who makes a change in the admin, as the store records it."""
    return f"{request.user.get_username()} (Django admin)"
