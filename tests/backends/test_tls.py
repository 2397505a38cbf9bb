"""Stores that accept only TLS: Relay connects with the CA given in the URL, and refuses a server
whose certificate that CA did not sign.

Each test starts its own TLS-only server on loopback with certificates it makes
(``tests/support/tls.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from relay import AcquireRequest, Outcome, open_backend
from relay.errors import BackendUnavailable
from tests.backends.pg_server import OwnPostgres, find_bin
from tests.support.tls import Certificates, certificates, tls_redis

UTC_NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return certificates(tmp_path / "certs")


def _leases(url: str) -> Outcome:
    backend = open_backend(url)
    try:
        return backend.acquire(AcquireRequest("tls", UTC_NOW, "me", 30)).outcome
    finally:
        backend.close()


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_over_tls_with_the_ca_in_the_url(tmp_path: Path, certs: Certificates) -> None:
    with tls_redis(tmp_path, certs) as port:
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs.ca}"
        assert _leases(url) is Outcome.WON
        with pytest.raises(BackendUnavailable, match="certificate verify failed"):
            _leases(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs.other_ca}")
        with pytest.raises(BackendUnavailable):  # plain text to a TLS port
            _leases(f"redis://127.0.0.1:{port}/0?socket_timeout=2")


@pytest.mark.redis
def test_redis_with_client_certificates(tmp_path: Path, certs: Certificates) -> None:
    with tls_redis(tmp_path, certs, client_certs=True) as port:
        base = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs.ca}"
        with pytest.raises(BackendUnavailable):
            _leases(base)
        own = f"{base}&ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}"
        assert _leases(own) is Outcome.WON


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture
def tls_postgres(certs: Certificates) -> Iterator[OwnPostgres]:
    """A PostgreSQL that takes connections over TLS only (``hostssl``), trusting its CA's
    client certificates; password-less trust otherwise, as the suite's other servers."""
    bindir = find_bin()
    if bindir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed")
    server = OwnPostgres(bindir)
    try:
        for name in ("server.pem", "server.key", "ca.pem"):
            shutil.copy(certs.ca.parent / name, server.data / name)
            if os.geteuid() == 0:
                shutil.chown(server.data / name, "postgres", "postgres")
        (server.data / "server.key").chmod(0o600)
        with (server.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n"
                "ssl_ca_file = 'ca.pem'\n"
            )
        (server.data / "pg_hba.conf").write_text(
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"
        )
        server.start()
        yield server
    finally:
        server.stop()


def test_postgres_over_tls_with_the_ca_in_the_url(
    tls_postgres: OwnPostgres, certs: Certificates
) -> None:
    url = f"{tls_postgres.url}?sslmode=verify-full&sslrootcert={certs.ca}"
    assert _leases(url) is Outcome.WON
    with pytest.raises(BackendUnavailable, match="certificate verify failed"):
        _leases(f"{tls_postgres.url}?sslmode=verify-full&sslrootcert={certs.other_ca}")
    with pytest.raises(BackendUnavailable, match=r"no encryption|SSL off|pg_hba"):
        _leases(f"{tls_postgres.url}?sslmode=disable")


def test_postgres_checks_the_host_name_with_verify_full(
    tls_postgres: OwnPostgres, certs: Certificates
) -> None:
    # The certificate names 127.0.0.1 only: localhost reaches the same server under a name it
    # does not carry, which verify-full refuses and verify-ca (the URL says so in words) accepts.
    by_name = tls_postgres.url.replace("127.0.0.1", "localhost")
    with pytest.raises(BackendUnavailable, match="does not match host name"):
        _leases(f"{by_name}?sslmode=verify-full&sslrootcert={certs.ca}")
    assert _leases(f"{by_name}?sslmode=verify-ca&sslrootcert={certs.ca}") is Outcome.WON


@pytest.mark.redis
def test_redis_checks_the_host_name(tmp_path: Path, certs: Certificates) -> None:
    with tls_redis(tmp_path, certs) as port:
        by_name = f"rediss://localhost:{port}/0?ssl_ca_certs={certs.ca}"
        with pytest.raises(BackendUnavailable, match=r"match|certificate"):
            _leases(by_name)
        assert _leases(f"{by_name}&ssl_check_hostname=false") is Outcome.WON
