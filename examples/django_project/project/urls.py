"""The admin: Relay's pages are under /admin/relay/."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
