"""NATS locked down: a user allowed only its bucket's subjects runs Relay, a missing permission
is named, and a TLS-only server is reached with the CA and client certificate in the URL.

Each test starts a nats-server of its own with a configuration file (users and TLS are
server-wide: the session's server is left alone).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

import relay
from relay import AcquireRequest, Outcome, open_backend
from relay.backends._nats_security import dedup_permissions, kv_permissions, kv_user
from relay.errors import BackendUnavailable, ConfigurationError
from tests.support.nats_locked import locked_nats
from tests.support.short_run import tokens_of_a_few_runs
from tests.support.tls import Certificates, certificates

pytestmark = pytest.mark.nats_kv
DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BUCKET = "app_relay"
NOW = datetime.now(UTC).replace(microsecond=0)


def _users(*entries: str) -> str:
    """An authorization block: an admin who may do anything, and ``entries``."""
    users = ["{ user: admin, password: adminpw }", *entries]
    return "authorization {\n  users = [\n" + "\n".join(users) + "\n  ]\n}"


def _relay_user(bucket: str = BUCKET, drop: str | None = None) -> str:
    entry = kv_user(bucket, "relay").replace("PASSWORD", "s3cret")
    return entry if drop is None else entry.replace(f'        "{drop}",\n', "")


def _leases(url: str) -> Outcome:
    backend = open_backend(url)
    try:
        return backend.acquire(AcquireRequest("locked", NOW, "me", 30)).outcome
    finally:
        backend.close()


def test_the_documented_user_is_the_one_relay_needs() -> None:
    assert kv_user("relay", "relay") in DOCS.read_text()


def test_instances_run_as_a_user_allowed_only_the_buckets_subjects(tmp_path: Path) -> None:
    with locked_nats(tmp_path, _users(_relay_user())) as port:
        url = f"nats://relay:s3cret@127.0.0.1:{port}?bucket={BUCKET}&timeout=2"
        ran = tokens_of_a_few_runs(url, lease=10, within=20)
        assert len(ran) >= 3 and ran == sorted(ran)
        with relay.Control(url) as control:
            assert control.pause("beat", reason="permissions test")
            control.resume("beat")
            control.trigger("beat")
        reader = open_backend(url, read_only=True)
        assert {r.job for r in reader.runs("beat")} == {"beat"}  # type: ignore[union-attr]
        assert [i.role for i in reader.instances()] == ["scheduler"]  # type: ignore[union-attr]
        reader.close()
        # Another bucket's subjects are not this user's.
        with pytest.raises(BackendUnavailable, match=r"refused this user publish.*KV_other"):
            _leases(f"nats://relay:s3cret@127.0.0.1:{port}?bucket=other&timeout=1")


def test_a_missing_permission_is_named(tmp_path: Path) -> None:
    missing = f"$JS.API.STREAM.INFO.KV_{BUCKET}"
    assert missing in kv_permissions(BUCKET)
    with locked_nats(tmp_path, _users(_relay_user(drop=missing))) as port:
        url = f"nats://relay:s3cret@127.0.0.1:{port}?bucket={BUCKET}&timeout=1"
        with pytest.raises(BackendUnavailable) as caught:
            _leases(url)
    message = str(caught.value)
    assert f"refused this user publish to '{missing}'" in message
    assert "add it to the user's publish allow list" in message and "s3cret" not in message


# -- TLS ---------------------------------------------------------------------------------------


def _tls(certs: Certificates, *, verify: bool = False) -> str:
    return (
        f'tls {{\n  cert_file: "{certs.server_cert}"\n  key_file: "{certs.server_key}"\n'
        f'  ca_file: "{certs.ca}"\n  verify: {"true" if verify else "false"}\n  timeout: 5\n}}'
    )


@pytest.mark.slow
def test_a_tls_only_server_with_the_ca_in_the_url(tmp_path: Path) -> None:
    certs = certificates(tmp_path / "certs")
    with locked_nats(tmp_path / "nats", _tls(certs)) as port:
        base = f"tls://127.0.0.1:{port}?bucket={BUCKET}&timeout=1"
        assert _leases(f"{base}&tlsca={certs.ca}") is Outcome.WON
        assert _leases(f"nats://127.0.0.1:{port}?bucket={BUCKET}&tlsca={certs.ca}") is Outcome.HELD
        with pytest.raises(BackendUnavailable, match="certificate verify failed"):
            _leases(f"{base}&tlsca={certs.other_ca}")
        with pytest.raises(BackendUnavailable, match=r"certificate verify failed.*tlsca="):
            _leases(base)  # the system's CAs did not sign it
        with pytest.raises(BackendUnavailable, match=r"Hostname mismatch.*host name its"):
            _leases(f"tls://localhost:{port}?bucket={BUCKET}&timeout=1&tlsca={certs.ca}")


@pytest.mark.slow
def test_client_certificates_where_the_server_asks(tmp_path: Path) -> None:
    certs = certificates(tmp_path / "certs")
    with locked_nats(tmp_path / "nats", _tls(certs, verify=True)) as port:
        base = f"tls://127.0.0.1:{port}?bucket={BUCKET}&timeout=2&tlsca={certs.ca}"
        with pytest.raises(BackendUnavailable):
            _leases(base)
        own = f"{base}&tlscert={certs.client_cert}&tlskey={certs.client_key}"
        assert _leases(own) is Outcome.WON


def test_tls_options_are_checked_when_the_backend_is_created(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="needs both"):
        open_backend(f"tls://127.0.0.1:1?tlscert={tmp_path}/c.pem")
    with pytest.raises(ConfigurationError, match="cannot load its TLS files"):
        open_backend(f"tls://127.0.0.1:1?tlsca={tmp_path}/missing.pem")


@pytest.mark.slow
def test_the_dedup_claim_strategy_over_tls(tmp_path: Path) -> None:
    certs = certificates(tmp_path / "certs")
    with locked_nats(tmp_path / "nats", _tls(certs, verify=True)) as port:
        own = f"tlsca={certs.ca}&tlscert={certs.client_cert}&tlskey={certs.client_key}"
        claims = open_backend(f"tls://127.0.0.1:{port}?strategy=dedup&timeout=2&{own}")
        try:
            assert claims.claim("locked", NOW) is True  # type: ignore[union-attr]
            assert claims.claim("locked", NOW) is False  # type: ignore[union-attr]
        finally:
            claims.close()
        with pytest.raises(BackendUnavailable, match="certificate verify failed"):
            open_backend(f"tls://127.0.0.1:{port}?strategy=dedup&timeout=1&tlsca={certs.other_ca}")


def _dedup_user(subjects: list[str]) -> str:
    allowed = ", ".join(f'"{subject}"' for subject in subjects)
    return (
        "{ user: relay, password: s3cret, permissions: { publish: { allow: ["
        f'{allowed}] }}, subscribe: {{ allow: ["_INBOX.>"] }} }} }}'
    )


def test_the_dedup_strategy_runs_with_its_stream_only(tmp_path: Path) -> None:
    subjects = dedup_permissions("RELAY_CLAIMS")
    assert all(f"`{subject}`" in DOCS.read_text() for subject in subjects)
    with locked_nats(tmp_path, _users(_dedup_user(subjects))) as port:
        url = f"nats://relay:s3cret@127.0.0.1:{port}?strategy=dedup&timeout=1"
        claims = open_backend(url)
        try:
            assert claims.claim("locked", NOW) is True  # type: ignore[union-attr]
            assert claims.claim("locked", NOW) is False  # type: ignore[union-attr]
        finally:
            claims.close()
        with pytest.raises(BackendUnavailable, match=r"refused this user publish.*OTHER"):
            open_backend(f"{url}&stream=OTHER")


def test_a_missing_dedup_permission_is_named(tmp_path: Path) -> None:
    missing = "$JS.API.STREAM.CREATE.RELAY_CLAIMS"
    subjects = [s for s in dedup_permissions("RELAY_CLAIMS") if s != missing]
    with (
        locked_nats(tmp_path, _users(_dedup_user(subjects))) as port,
        pytest.raises(BackendUnavailable) as caught,
    ):
        open_backend(f"nats://relay:s3cret@127.0.0.1:{port}?strategy=dedup&timeout=1")
    assert f"refused this user publish to '{missing}'" in str(caught.value)
