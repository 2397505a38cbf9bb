"""Relay as a least-privilege Redis user: the documented ACL rule is enough, and a user missing a
rule is told which one to add.

Each test starts a Redis of its own (ACL users are server-wide: the shared server is left alone).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

import relay
from relay import AcquireRequest, Outcome, open_backend
from relay.backends._redis import acl_rule
from relay.errors import BackendUnavailable
from tests.support.redis_server import RedisServer, own_redis
from tests.support.short_run import tokens_of_a_few_runs

pytestmark = pytest.mark.redis
PREFIX = "app:relay:"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with own_redis(tmp_path) as started:
        yield started


def _user(server: RedisServer, rule: str, password: str = "s3cret") -> str:
    """Create the user a rule describes; return a URL that logs in as it."""
    admin = redis.Redis(port=server.port)
    words = shlex.split(rule.replace(">PASSWORD", f">{password}"))
    admin.execute_command(*words)
    admin.set("other:secret", "not Relay's")
    admin.close()
    return f"redis://{words[2]}:{password}@127.0.0.1:{server.port}/0?prefix={PREFIX}"


def test_the_documented_rule_is_the_one_relay_needs() -> None:
    assert acl_rule(PREFIX, "relay") in DOCS.read_text()
    assert acl_rule("relay:", "relay") in DOCS.read_text()


def test_instances_run_as_the_least_privilege_user(server: RedisServer) -> None:
    url = _user(server, acl_rule(PREFIX, "relay"))
    ran = tokens_of_a_few_runs(url, lease=5, within=10)
    assert len(ran) >= 3 and ran == sorted(ran)
    control = relay.Control(url)
    control.pause("beat", reason="acl test")
    control.resume("beat")
    control.trigger("beat")
    control.close()
    reader = open_backend(url, read_only=True)
    assert reader.capability == "lease"
    assert {r.job for r in reader.runs("beat")} == {"beat"}
    reader.close()
    for strategy in ("stream-id", "script"):
        claims = open_backend(f"{url}&strategy={strategy}")
        assert claims.capability == "claim"
        assert claims.claim("beat", datetime.now(UTC).replace(microsecond=0))
        claims.close()


def test_relay_cannot_touch_other_keys_as_that_user(server: RedisServer) -> None:
    url = _user(server, acl_rule(PREFIX, "relay"))
    client = redis.Redis.from_url(url.split("?")[0])
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get("other:secret")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.flushall()
    client.close()


def _request(job: str) -> AcquireRequest:
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    return AcquireRequest(job, slot, "me", 30)


def test_a_missing_command_is_named_with_the_rule_to_add(server: RedisServer) -> None:
    rule = acl_rule(PREFIX, "relay").replace(" +evalsha", "").replace(" +eval ", " ")
    backend = open_backend(_user(server, rule))
    with pytest.raises(BackendUnavailable, match=r"\+evalsha") as caught:
        backend.acquire(_request("job"))
    assert "s3cret" not in str(caught.value)
    assert re.search(r"ACL SETUSER <user> on >PASSWORD resetkeys ~<prefix>\*", str(caught.value))
    backend.close()


def test_a_command_a_script_needs_is_reported_with_the_whole_rule(server: RedisServer) -> None:
    backend = open_backend(_user(server, acl_rule(PREFIX, "relay").replace(" +hset", "")))
    with pytest.raises(BackendUnavailable, match="one of Relay's scripts calls") as caught:
        backend.acquire(_request("job"))
    assert "+hset" in str(caught.value)
    backend.close()
    whole = open_backend(_user(server, acl_rule(PREFIX, "whole"), "other"))
    assert whole.acquire(_request("job")).outcome is Outcome.WON
    whole.close()
