"""Certificates and TLS-only servers of a test's own, on loopback.

``certificates(folder)`` makes, with the machine's ``openssl``, a CA, a server certificate it
signed for the address 127.0.0.1 only (so ``localhost``, which reaches the same server, fails a
host name check), a client certificate it signed, and a second CA that signed none of them (to
show that a wrong CA is refused).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.support.ports import free_port

__all__ = ["Certificates", "certificates", "tls_redis"]


@dataclass(frozen=True)
class Certificates:
    """Paths of a test's PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(folder: Path, *args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.skip("openssl is not installed: it makes the tests' certificates")
    subprocess.run([binary, *args], cwd=folder, check=True, capture_output=True, timeout=60)


def _ca(folder: Path, name: str) -> None:
    _openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-subj", f"/CN=relay {name}")  # fmt: skip


def _signed(folder: Path, name: str, subject: str, extensions: str) -> None:
    (folder / f"{name}.ext").write_text(extensions + "\n")
    _openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={subject}")  # fmt: skip
    _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
             "-extfile", f"{name}.ext")  # fmt: skip


def certificates(folder: Path) -> Certificates:
    """A CA, a server and a client certificate it signed, and another CA, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    _signed(folder, "server", "127.0.0.1", "subjectAltName=IP:127.0.0.1")
    _signed(folder, "client", "relay", "extendedKeyUsage=clientAuth")
    for key in folder.glob("*.key"):
        key.chmod(0o600)
    return Certificates(
        folder / "ca.pem", folder / "server.pem", folder / "server.key",
        folder / "client.pem", folder / "client.key", folder / "other-ca.pem",
    )  # fmt: skip


@contextmanager
def tls_redis(folder: Path, certs: Certificates, *, client_certs: bool = False) -> Iterator[int]:
    """A redis-server that accepts only TLS (``--port 0``); yields its TLS port."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    process = subprocess.Popen(
        [
            binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key),
            "--tls-ca-cert-file", str(certs.ca),
            "--tls-auth-clients", "yes" if client_certs else "no",
            "--save", "", "--appendonly", "no", "--dir", str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_tls_redis(port, certs, process)
        yield port
    finally:
        process.kill()
        process.wait(timeout=30)


def _wait_for_tls_redis(port: int, certs: Certificates, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the TLS redis-server on port {port} exited")
        client = redis.Redis(
            host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(certs.ca),
            ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key),
            socket_connect_timeout=1,
        )  # fmt: skip
        try:
            if client.ping():
                return
        except (redis.ConnectionError, ssl.SSLError):
            time.sleep(0.05)
        finally:
            client.close()
    raise AssertionError(f"the TLS redis-server on port {port} did not answer")
