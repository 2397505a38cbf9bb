"""``relay.backends.capability_of`` tells a claim URL from a lease URL without opening it."""

from __future__ import annotations

import importlib

import pytest

from relay.backends import _REGISTRY, capability_of
from relay.errors import UnknownBackend


@pytest.mark.parametrize("key", sorted(_REGISTRY), ids=lambda k: "-".join(filter(None, k)))
def test_it_agrees_with_each_backend_class(key: tuple[str, str]) -> None:
    scheme, strategy = key
    module, name, _, driver = _REGISTRY[key]
    pytest.importorskip(driver)
    cls = getattr(importlib.import_module(f"relay.backends.{module}"), name)
    option = "mode" if scheme == "amqp" else "strategy"
    url = f"{scheme}://host/x" + (f"?{option}={strategy}" if strategy else "")
    assert capability_of(url) == cls.capability


def test_it_refuses_what_open_backend_refuses() -> None:
    with pytest.raises(UnknownBackend, match="known schemes"):
        capability_of("mysql://db/x")
