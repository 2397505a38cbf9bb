"""Running the test Django site's ``manage.py`` in a fresh process per call.

Django's settings are configured once per process, so each case gets its own interpreter, with
its database (``RELAY_T_DB``) and extra settings (``RELAY_T_SETTINGS``) in the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.procs import ROOT

__all__ = ["manage", "site_env", "spawn_manage"]


def site_env(db: str | Path, **settings: Any) -> dict[str, str]:
    """The environment of the test site: its database and extra settings."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.django_app.site.settings",
        "RELAY_T_DB": str(db),
        "RELAY_T_SETTINGS": json.dumps(settings),
    }


def manage(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` of the test site; the result, whatever its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "tests.django_app.site.manage", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def spawn_manage(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``manage.py ARGS`` started in the background (output to pipes)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.django_app.site.manage", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
