"""Instances' heartbeats and ``relay health``: a probe that tells a live instance from a dead one.

The process tests start a real standalone scheduler that beats, probe it with the real ``relay``
command, SIGKILL it, and probe again once the max age has passed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from relay import open_backend
from relay.errors import ConfigurationError
from relay.health import InstanceHeartbeat, InstanceInfo, is_alive
from tests.support.procs import ROOT
from tests.support.redis_server import own_redis

UTC = timezone.utc


def relay_command(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``relay`` command, as a probe runs it: a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
def test_health_passes_for_a_live_scheduler_and_fails_once_it_is_killed(lease_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.health_instance", lease_url, "probe-me:1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    ) as instance:  # fmt: skip
        try:
            assert instance.stdout is not None and instance.stderr is not None
            assert instance.stdout.readline() == "ready\n", instance.stderr.read()
            time.sleep(1.2)  # a few beats: the probe must see a recent one, not the first
            alive = relay_command("health", "--backend", lease_url, "--role", "scheduler")
            assert alive.returncode == 0, alive.stdout + alive.stderr
            assert "alive: scheduler probe-me:1" in alive.stdout
            owner = relay_command("health", "--backend", lease_url, "--owner", "probe-me:1")
            assert owner.returncode == 0, owner.stdout + owner.stderr
        finally:
            instance.send_signal(signal.SIGKILL)
            instance.wait()
    time.sleep(1.5 + 0.5)  # past the default max age: 3 beats of 0.5 s
    dead = relay_command("health", "--backend", lease_url)
    assert dead.returncode == 1, dead.stdout + dead.stderr
    assert "late: scheduler probe-me:1" in dead.stdout and "unhealthy" in dead.stdout
    generous = relay_command("health", "--backend", lease_url, "--max-age", "60")
    assert generous.returncode == 0, generous.stdout + generous.stderr
    listed = relay_command("instances", "--backend", lease_url)
    assert listed.returncode == 0 and "probe-me:1" in listed.stdout and "late" in listed.stdout


def test_health_fails_when_no_instance_of_the_role_beat(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    backend = open_backend(url)
    InstanceHeartbeat(backend, "w:1", "worker").record()
    backend.close()
    assert relay_command("health", "--backend", url, "--role", "worker").returncode == 0
    beat = relay_command("health", "--backend", url, "--role", "beat")
    assert beat.returncode == 1 and "none recorded" in beat.stdout
    other_host = relay_command("health", "--backend", url, "--host", "not-this-host")
    assert other_host.returncode == 1


def test_the_reporter_writes_at_most_once_per_interval(tmp_path: Path) -> None:
    backend = open_backend(f"sqlite:///{tmp_path / 'relay.db'}")
    now = [100.0]
    beat = InstanceHeartbeat(backend, "me:1", "scheduler", interval=10, clock=lambda: now[0])
    assert beat.maybe_record() is True
    (first,) = backend.instances()
    now[0] += 9.9
    time.sleep(0.01)
    assert beat.maybe_record() is False
    assert backend.instances() == [first]
    now[0] += 0.1
    assert beat.maybe_record() is True
    (second,) = backend.instances()
    assert first.beat_at is not None and second.beat_at is not None
    assert second.beat_at > first.beat_at
    backend.close()


@pytest.mark.redis
@pytest.mark.slow
def test_the_reporter_swallows_an_unavailable_store(tmp_path: Path) -> None:
    with own_redis(tmp_path) as server:
        backend = open_backend(server.url)
        beat = InstanceHeartbeat(backend, "me:1", "beat", interval=0.1)
        assert beat.maybe_record() is True
        server.kill()
        assert beat.maybe_record() is False  # within the interval: no I/O at all
        time.sleep(0.15)
        assert beat.maybe_record() is False  # logged, not raised
        backend.close()


def test_the_reporter_does_nothing_on_a_claim_backend(tmp_path: Path) -> None:
    backend = open_backend(f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim")
    assert InstanceHeartbeat(backend, "me:1", "worker").maybe_record() is False
    backend.close()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"role": "cron"}, "role 'cron' is not known"),
        ({"role": "beat", "interval": 0}, "must be positive"),
        ({"role": "beat", "interval": 10, "ttl": 5}, "at least as long"),
    ],
)
def test_the_reporter_refuses_bad_options(
    tmp_path: Path, options: dict[str, object], words: str
) -> None:
    backend = open_backend(f"sqlite:///{tmp_path / 'relay.db'}")
    with pytest.raises(ConfigurationError, match=words):
        InstanceHeartbeat(backend, "me:1", **options)  # type: ignore[arg-type]
    backend.close()


def test_is_alive_uses_the_instances_own_interval_unless_given_a_max_age() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    info = InstanceInfo("a", "beat", "h", 1, now, "1", 10.0, beat_at=now - timedelta(seconds=25))
    assert is_alive(info, now) and not is_alive(info, now, max_age=20)
    assert not is_alive(info, now + timedelta(seconds=6)) and is_alive(info, now, max_age=25)


def test_a_version_2_sqlite_file_is_migrated_and_read_only_reads_it_before(tmp_path: Path) -> None:
    path = tmp_path / "relay.db"
    open_backend(f"sqlite:///{path}").close()
    with closing(sqlite3.connect(path)) as conn:  # as Relay's schema 2 left it
        conn.execute("DROP TABLE relay_instances")
        conn.execute("UPDATE relay_meta SET value = '2' WHERE key = 'schema_version'")
        conn.commit()
    reader = open_backend(f"sqlite:///{path}", read_only=True)
    assert reader.capability == "lease" and reader.instances() == []
    reader.close()
    backend = open_backend(f"sqlite:///{path}")
    assert backend.capability == "lease"
    InstanceHeartbeat(backend, "me:1", "scheduler").record()
    assert [i.owner for i in backend.instances()] == ["me:1"]
    backend.close()


def test_every_public_name_of_relay_health_says_what_it_is() -> None:
    import inspect

    import relay.health

    for name in relay.health.__all__:
        value = getattr(relay.health, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, name
