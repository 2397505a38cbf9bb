"""relay.metrics and relay.tracing: documented names, and no optional import until used."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["relay.metrics", "relay.tracing"])
def test_every_public_name_has_a_docstring(module: str) -> None:
    loaded = importlib.import_module(module)
    assert loaded.__doc__
    for name in loaded.__all__:
        value = getattr(loaded, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{module}.{name} has no docstring"


def test_importing_them_imports_neither_prometheus_nor_opentelemetry() -> None:
    code = (
        "import sys, relay.metrics, relay.tracing\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted({'prometheus_client', 'opentelemetry'} & loaded))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_the_documented_targets_type_check() -> None:
    mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the 'dev' extra")
    stdout, stderr, status = mypy_api.run(["--strict", "tests/typing/metrics_targets.py"])
    assert status == 0, stdout + stderr
