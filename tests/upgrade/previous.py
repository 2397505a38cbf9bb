"""The previous release of Relay, installed once per test run into a venv of its own.

``previous_release.txt`` names it: its tag and the commit the tag points at. A checkout that carries
the tag uses the tag; a clone without tags (CI's) finds the commit. ``git archive`` writes that
commit's tree to a folder and pip installs it, with the store drivers, into a new venv beside
the test run's temporary folders; pip's own cache keeps a second build cheap. pytest-xdist
workers share one venv: the first to ask builds it under a file lock, the others wait for it.

Outside a git checkout (a source tarball) the upgrade tests skip, saying so; a checkout whose
history lacks the commit (a shallow clone) skips too, except under ``RELAY_REQUIRE_SERVICES=1``
(CI), where it fails with the command that fetches it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import ROOT

__all__ = ["Release", "install", "previous_release"]

RECORD = Path(__file__).with_name("previous_release.txt")
EXTRAS = "redis,postgres-binary,nats"
"""The stores the upgrade tests run on, as the previous release's extras."""


@dataclass(frozen=True)
class Release:
    """A release of Relay: its tag and commit, and where its interpreter is once installed."""

    tag: str
    commit: str
    python: Path | None = None


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def _unavailable(reason: str) -> None:
    if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
        pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def previous_release() -> Release:
    """The release before this one, as a commit of this checkout's history (skip if none)."""
    tag, commit = RECORD.read_text().split()
    try:
        inside = _git("rev-parse", "--is-inside-work-tree").stdout.strip() == b"true"
    except (OSError, subprocess.TimeoutExpired):
        inside = False
    if not inside:
        _unavailable(
            f"{ROOT} is not a git checkout, so the previous release ({tag}) cannot be built"
        )
    tagged = _git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
    if tagged.returncode == 0:
        return Release(tag, tagged.stdout.decode().strip())
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        return Release(tag, commit)
    _unavailable(
        f"this checkout has neither the tag {tag} nor its commit {commit[:12]} (a shallow "
        f"clone?): run `git fetch --unshallow --tags` so the upgrade tests can build {tag}"
    )
    raise AssertionError("unreachable")


def install(release: Release, folder: Path) -> Release:
    """``release`` installed into ``folder/<commit>/venv``, built once whoever asks first."""
    home = folder / f"relay-{release.tag}-{release.commit[:12]}"
    home.mkdir(parents=True, exist_ok=True)
    python = home / "venv" / "bin" / "python"
    done = home / "installed"
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            _build(release, home)
            done.write_text(f"{release.tag} {release.commit}\n")
    return Release(release.tag, release.commit, python)


def _build(release: Release, home: Path) -> None:
    """Archive the commit's tree, make a venv without pip, and install into it with ours."""
    source = Path(tempfile.mkdtemp(prefix="src-", dir=home))
    with tempfile.TemporaryFile() as archive:
        subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", release.commit],
            stdout=archive, check=True, timeout=120,
        )  # fmt: skip
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(source, **safe)  # type: ignore[arg-type]
    venv = home / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True
    )
    # HEAD's pip installs into the new venv (--python): no pip of its own to set up. Not
    # editable, so the old code is a copy that nothing in this checkout can change.
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--quiet", "--no-compile", "--disable-pip-version-check", f"{source}[{EXTRAS}]"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if installed.returncode != 0:
        raise AssertionError(f"pip could not install {release.tag}:\n{installed.stderr}")
