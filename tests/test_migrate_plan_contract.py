"""``relay migrate --plan`` and ``--contract`` on every lease store: the plan names the layout,
what a migration adds and whether each live instance's Relay can go on beside it; a contraction
is refused, naming each live instance of an older Relay, and raises the store's floor once none
runs."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from relay import open_backend
from relay.cli import main
from relay.errors import InstancesTooOld, StoreTooNew
from relay.instances import InstanceInfo
from relay.layout import CONTRACT_FLOOR, FLOOR, Layout
from relay.migrate import contract, plan


def _beat(url: str, owner: str, version: str) -> None:
    """Record a live instance of Relay ``version`` in the store, as its heartbeat would."""
    backend = open_backend(url)
    try:
        info = InstanceInfo(
            owner=owner, role="scheduler", host="web-1", pid=7,
            started_at=datetime.now(timezone.utc), version=version, interval=10.0,
        )  # fmt: skip
        backend.record_instance(info, 60)  # type: ignore[union-attr]
    finally:
        backend.close()


def _layout(url: str) -> Layout:
    backend = open_backend(url)
    try:
        found = backend.layout()  # type: ignore[union-attr]
        assert isinstance(found, Layout)
        return found
    finally:
        backend.close()


def test_contract_is_refused_while_an_older_relay_runs_and_names_it(lease_url: str) -> None:
    _beat(lease_url, "old-beat:1:aa", "0.1.0")
    _beat(lease_url, "new-beat:2:bb", "0.2.0")
    with pytest.raises(InstancesTooOld, match=r"old-beat:1:aa \(Relay 0\.1\.0\).*upgrade or stop"):
        contract(lease_url)
    assert _layout(lease_url).min_relay == FLOOR  # nothing changed
    result = CliRunner().invoke(main, ["migrate", "--backend", lease_url, "--contract"])
    assert result.exit_code == 1 and "old-beat:1:aa (Relay 0.1.0)" in result.output
    assert "new-beat" not in result.output


def test_contract_without_older_instances_raises_the_floor(lease_url: str) -> None:
    _beat(lease_url, "new-beat:2:bb", "0.2.0")
    said = contract(lease_url)
    assert "nothing to remove in this release" in said and f"Relay {CONTRACT_FLOOR}" in said
    assert _layout(lease_url).min_relay == CONTRACT_FLOOR
    assert "can go on beside it" in plan(lease_url)  # this Relay still uses it


def test_plan_says_what_changes_and_who_can_go_on_and_changes_nothing(lease_url: str) -> None:
    _beat(lease_url, "old-beat:1:aa", "0.1.0")
    before = _layout(lease_url)
    result = CliRunner().invoke(main, ["migrate", "--backend", lease_url, "--plan"])
    assert result.exit_code == 0, result.output
    assert f"at layout {before.layout}, usable by Relay {FLOOR} and newer" in result.output
    assert "Relay 0.1.0: can go on beside it" in result.output
    assert "`--contract` waits until it runs Relay 0.2.0" in result.output
    assert _layout(lease_url) == before


def test_plan_names_a_store_this_relay_cannot_use(lease_url: str) -> None:
    backend = open_backend(lease_url)
    found = backend.layout()  # type: ignore[union-attr]
    backend.record_layout(Layout(found.layout + 3, "0.4.0"))  # type: ignore[union-attr]
    backend.close()
    said = plan(lease_url)
    assert "cannot use the store" in said and "needs Relay 0.4 or newer" in said
    with pytest.raises(StoreTooNew):
        contract(lease_url)


def test_plan_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    said = plan(f"sqlite:///{tmp_path / 'none.db'}")
    assert "does not exist" in said and "would create it" in said
    assert not (tmp_path / "none.db").exists()


def test_plan_and_contract_go_one_at_a_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    result = CliRunner().invoke(main, ["migrate", "--backend", url, "--plan", "--contract"])
    assert result.exit_code == 2 and "one at a time" in result.output


@pytest.mark.postgres
def test_plan_lists_the_migrations_of_an_older_postgres_schema(tmp_path: Path) -> None:
    import psycopg

    from relay.backends._postgres_schema import SCHEMA_VERSION
    from tests.support.backends import postgres_lease
    from tests.support.services import SERVICES

    with postgres_lease(tmp_path) as url:
        open_backend(url).close()
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{schema}".layout')
            conn.execute(f"UPDATE \"{schema}\".meta SET value = '14' WHERE key = 'schema_version'")
        said = plan(url)
        assert "at layout 14" in said and f"brings it to layout {SCHEMA_VERSION}" in said
        assert "0015_acquire_many_inserts_new_runs.sql" in said
        assert "0016_heartbeat_in_a_function.sql" in said


def test_plan_lists_the_steps_of_an_older_sqlite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.backends import sqlite as sqlite_backend

    path = tmp_path / "relay.db"
    with monkeypatch.context() as patched:  # as Relay 0.1 (layout 7) left it
        patched.setattr(sqlite_backend, "SCHEMA_VERSION", 7)
        open_backend(f"sqlite:///{path}").close()
    said = plan(f"sqlite:///{path}")
    assert "at layout 7, usable by Relay 0.1.0 and newer" in said
    assert ": ALTER TABLE relay_instances ADD COLUMN problem TEXT" in said  # Relay 0.2's step
    assert "It stays usable by Relay 0.1.0 and newer" in said
