"""A RabbitMQ virtual host and user of a test's own, made with ``rabbitmqctl`` on the shared
broker and deleted afterwards, even on failure; the broker's users and vhosts are then checked to
be what they were. Without a ``rabbitmqctl`` that may manage the broker, the test skips with the
reason (it fails under ``RELAY_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from relay.backends._amqp import permissions
from tests.support.services import require

__all__ = ["RabbitUser", "ctl", "rabbitmq_user"]


def ctl(*args: str) -> str:
    """``rabbitmqctl -q ARGS``' output; ``AssertionError`` naming the failure."""
    done = subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _names(kind: str) -> set[str]:
    """The broker's users or vhosts (first column)."""
    return {line.split("\t")[0] for line in ctl(kind).splitlines()[1:] if line.strip()}


@dataclass(frozen=True)
class RabbitUser:
    """A vhost and a user of the test's own; :meth:`url` logs in as that user."""

    host: str
    user: str
    password: str

    def url(self, **options: str) -> str:
        """An ``amqp://`` URL on the vhost as the user, with ``options`` as its query."""
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"amqp://{self.user}:{self.password}@127.0.0.1:5672/{self.host}?{query}"

    def allow(self, prefix: str | None, *, drop_default_exchange: bool = False) -> None:
        """Give the user Relay's permissions for ``prefix``'s queues (``None``: everything)."""
        configure, write, read = (".*", ".*", ".*") if prefix is None else permissions(prefix)
        if drop_default_exchange:
            write = write.replace("|amq\\.default", "")
        ctl("set_permissions", "-p", self.host, self.user, configure, write, read)


@contextmanager
def rabbitmq_user(password: str | None = None) -> Iterator[RabbitUser]:
    """A fresh vhost and user (no permissions yet), both deleted afterwards."""
    require("rabbitmq")
    if shutil.which("rabbitmqctl") is None:
        _skip("rabbitmqctl is not installed: it makes the test's user and vhost")
    try:
        before = (_names("list_users"), _names("list_vhosts"))
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        _skip(f"rabbitmqctl cannot manage the broker here ({exc})")
    tag = secrets.token_hex(4)
    made = RabbitUser(f"relay_t_{tag}", f"relay_t_{tag}", password or f"pw{tag}")
    try:
        ctl("add_vhost", made.host)
        ctl("add_user", made.user, made.password)
        yield made
    finally:
        for args in (("delete_vhost", made.host), ("delete_user", made.user)):
            subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, timeout=60)
    users, vhosts = _names("list_users"), _names("list_vhosts")
    assert made.user not in users and made.host not in vhosts  # ours are gone
    # The broker's own users and vhosts are untouched; other tests' relay_t_* come and go meanwhile.
    assert (_lasting(users), _lasting(vhosts)) == (_lasting(before[0]), _lasting(before[1]))


def _lasting(names: set[str]) -> set[str]:
    return {name for name in names if not name.startswith("relay_t_")}


def _skip(reason: str) -> None:
    if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
        pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)
