"""Commands that only read never write: ``relay runs``, ``relay instances``, ``relay health``.

Each runs against every lease backend's real server. A URL naming a store that does not exist (a
mistyped file, schema, key prefix or bucket) fails with exit status 1 and a message naming what
was not found, and the store still does not exist afterwards.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

from relay import AcquireRequest, open_backend
from relay.cli import main
from relay.health import InstanceHeartbeat

READ_COMMANDS = [
    ["runs"], ["runs", "--job", "nightly", "--json"], ["instances"], ["health"],
    ["health", "--jobs"], ["overdue"], ["overdue", "--json"],
]  # fmt: skip


def store_exists(url: str) -> bool:
    """Whether anything of the store a lease URL names exists on its server, asked directly."""
    parts = urlsplit(url)
    option = {k: v[0] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "sqlite":
        return Path(parts.path[1:]).exists()
    if parts.scheme.startswith("postgres"):
        import psycopg

        base = url.split("?")[0]
        with psycopg.connect(base, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (option["schema"],)
            )
            return found.fetchone() is not None
    if parts.scheme == "redis":
        import redis

        with redis.Redis.from_url(url.split("?")[0]) as client:
            return next(iter(client.scan_iter(match=f"{option['prefix']}*")), None) is not None
    return _nats_buckets_exist(url.split("?")[0], option["bucket"])


def _nats_buckets_exist(server: str, bucket: str) -> bool:
    import nats
    import nats.js.errors

    async def look() -> bool:
        nc = await nats.connect(server, connect_timeout=5, max_reconnect_attempts=1)
        try:
            found = False
            for name in (bucket, f"{bucket}-instances"):
                try:
                    await nc.jetstream().stream_info(f"KV_{name}")
                    found = True
                except nats.js.errors.NotFoundError:
                    pass
            return found
        finally:
            await nc.close()

    return asyncio.run(look())


def named_store(url: str) -> str:
    """The name a 'not found' message must mention: the file, schema, prefix or bucket."""
    parts = urlsplit(url)
    option = {k: v[0] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "sqlite":
        return Path(parts.path[1:]).name
    for key in ("schema", "prefix", "bucket"):
        if key in option:
            return option[key]
    raise AssertionError(url)


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_read_of_a_missing_store_fails_and_creates_nothing(
    lease_url: str, command: list[str]
) -> None:
    assert not store_exists(lease_url)
    result = CliRunner().invoke(main, [*command, "--backend", lease_url])
    assert result.exit_code == 1, result.output
    assert named_store(lease_url) in result.output
    assert "not exist" in result.output or "no key" in result.output
    assert not store_exists(lease_url), "a read-only command created the store"


def test_relay_backend_in_the_environment_is_the_default(lease_url: str) -> None:
    result = CliRunner().invoke(main, ["instances"], env={"RELAY_BACKEND": lease_url})
    assert result.exit_code == 1 and named_store(lease_url) in result.output
    assert not store_exists(lease_url)


def test_runs_shows_full_times_errors_and_json_and_refuses_an_unknown_job(lease_url: str) -> None:
    backend = open_backend(lease_url)
    assert backend.capability == "lease"
    slot = backend.now().replace(microsecond=0)
    won = backend.acquire(AcquireRequest("nightly", slot, "host-a:1:ab", 30)).run
    assert won is not None
    backend.start(won.id, won.token, won.owner, 30)
    backend.finish(won.id, won.token, succeeded=False, error="ValueError: the disk is full " * 4)
    backend.close()

    table = CliRunner().invoke(main, ["runs", "--backend", lease_url, "--job", "nightly"])
    assert table.exit_code == 0, table.output
    assert won.id.split("@")[1] in table.output  # the whole slot, not cut to fit
    assert "+00:00" in table.output  # started and finished carry their zone
    assert ("ValueError: the disk is full " * 4).strip() in table.output  # on one line: no width

    as_json = CliRunner().invoke(main, ["runs", "--backend", lease_url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    (record,) = json.loads(as_json.output)
    assert record["id"] == won.id and record["state"] == "failed"
    assert record["error"].startswith("ValueError") and record["started_at"].endswith("+00:00")

    unknown = CliRunner().invoke(main, ["runs", "--backend", lease_url, "--job", "nightlly"])
    assert unknown.exit_code == 1 and "'nightlly' has no runs" in unknown.output


def test_instances_lists_what_beat(lease_url: str) -> None:
    backend = open_backend(lease_url)
    InstanceHeartbeat(backend, "host-a:1:ab", "beat", interval=5).record()
    InstanceHeartbeat(backend, "host-b:2:cd", "dramatiq-worker", interval=5).record()
    backend.close()
    table = CliRunner().invoke(main, ["instances", "--backend", lease_url])
    assert table.exit_code == 0, table.output
    assert "host-a:1:ab" in table.output and "dramatiq-worker" in table.output
    assert table.output.count("alive") == 2
    rows = json.loads(
        CliRunner().invoke(main, ["instances", "--backend", lease_url, "--json"]).output
    )
    assert [(r["role"], r["owner"], r["alive"]) for r in rows] == [
        ("beat", "host-a:1:ab", True),
        ("dramatiq-worker", "host-b:2:cd", True),
    ]


def test_read_commands_refuse_a_claim_backend_and_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "claims.db"
    for command in READ_COMMANDS:
        result = CliRunner().invoke(
            main, [*command, "--backend", f"sqlite:///{path}?strategy=claim"]
        )
        assert result.exit_code == 1 and "claim backend" in result.output, result.output
    assert not path.exists()


def test_an_existing_sqlite_file_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "relay.db"
    open_backend(f"sqlite:///{path}").close()
    before = path.read_bytes()
    for command in READ_COMMANDS:
        CliRunner().invoke(main, [*command, "--backend", f"sqlite:///{path}"])
    assert path.read_bytes() == before
    wal = path.with_name("relay.db-wal")  # SQLite's own journal: a reader may make it, empty
    assert not wal.exists() or wal.stat().st_size == 0


def _store_with_three_runs(path: Path) -> tuple[str, list[str]]:
    """Runs of ``hourly`` 3 h, 30 min and 1 min ago: succeeded, failed, running."""
    url = f"sqlite:///{path}"
    backend = open_backend(url)
    assert backend.capability == "lease"
    now = backend.now().replace(microsecond=0)
    ids = []
    for ago, outcome in ((10_800, True), (1_800, False), (60, None)):
        won = backend.acquire(AcquireRequest("hourly", now - timedelta(seconds=ago), "a", 60)).run
        assert won is not None
        ids.append(won.id)
        if outcome is not None:
            backend.finish(won.id, won.token, succeeded=outcome, error=None if outcome else "boom")
    backend.close()
    return url, ids


def _ids(output: str) -> list[str]:
    return [record["id"] for record in json.loads(output)]


def test_runs_filters_by_state_and_age(tmp_path: Path) -> None:
    url, (old, failed, running) = _store_with_three_runs(tmp_path / "relay.db")

    def shown(*options: str) -> list[str]:
        result = CliRunner().invoke(main, ["runs", "--backend", url, "--json", *options])
        assert result.exit_code == 0, result.output
        return _ids(result.output)

    assert shown() == [running, failed, old]
    assert shown("--state", "failed") == [failed]
    assert shown("--state", "running", "--state", "succeeded") == [running, old]
    assert shown("--since", "1h") == [running, failed]
    assert shown("--since", "1h", "--state", "succeeded") == []
    assert shown("--limit", "1", "--state", "succeeded") == [old]
    bad = CliRunner().invoke(main, ["runs", "--backend", url, "--state", "done"])
    assert bad.exit_code == 2 and "'done' is not one of" in bad.output


def test_runs_follow_prints_runs_as_they_appear_and_change(tmp_path: Path) -> None:
    url, (old, failed, running) = _store_with_three_runs(tmp_path / "relay.db")
    command = [sys.executable, "-m", "relay.cli", "runs", "--backend", url, "--follow", "--json"]
    follower = subprocess.Popen(
        [*command, "--interval", "0.1"],
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
        # Ctrl-C reaches it even when this test runs with SIGINT ignored (a shell's background
        # job): Python turns SIGINT into KeyboardInterrupt only if it starts with the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert follower.stdout is not None
    try:
        lines = [json.loads(follower.stdout.readline()) for _ in range(3)]
        assert [(r["id"], r["state"]) for r in lines] == [
            (old, "succeeded"), (failed, "failed"), (running, "running")
        ]  # fmt: skip
        backend = open_backend(url)
        assert backend.capability == "lease"
        (live,) = [r for r in backend.runs("hourly") if r.id == running]
        backend.finish(running, live.token, succeeded=True)
        backend.close()
        changed = json.loads(follower.stdout.readline())
        assert (changed["id"], changed["state"]) == (running, "succeeded")
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            code = follower.wait(timeout=10)
        finally:  # never leave it running for the next test to trip over
            if follower.poll() is None:
                follower.kill()
                follower.wait()
            follower.stdout.close()
    assert code == 0
