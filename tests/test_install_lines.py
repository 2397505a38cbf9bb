"""Every ``pip install`` line of the README, the docs and the examples works in a fresh venv.

Each distinct line is run once, in its own new virtual environment, the way a reader would type
it, with Relay taken from this checkout: ``relay-scheduler[...]`` from a wheel built once
(``--find-links``; the name is not published on PyPI), ``-e .[...]`` as an editable install of the
checkout. Then ``tests/support/install_check.py`` proves the documented set-up works with only
what the line installed: each integration against a Redis broker and a RabbitMQ broker, each store
driver against its real server. pip's cache keeps the whole module to a couple of minutes.

Lines that install other projects only (``pip install celery-redbeat`` …) are the "before" column
of the migration guides, and are not run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import services
from tests.support.doc_blocks import ROOT

pytestmark = pytest.mark.slow

CHECK = ROOT / "tests" / "support" / "install_check.py"
_PIP = re.compile(r"pip install\s+((?:-[-\w]+\s+)*)(['\"]?)([^\s'\"`]+)\2")


def install_lines() -> dict[tuple[bool, tuple[str, ...]], list[str]]:
    """``(editable, extras)`` -> where the line appears, for every line that installs Relay."""
    found: dict[tuple[bool, tuple[str, ...]], list[str]] = {}
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*")]
    for page in sorted(p for p in pages if p.suffix in (".md", ".py")):
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for options, _, spec in _PIP.findall(line):
                where = f"{page.relative_to(ROOT)}:{number}"
                name, _, extras = spec.partition("[")
                if name not in ("relay-scheduler", "."):
                    assert page.parent.name == "migrate", f"{where}: {spec} does not install Relay"
                    continue
                key = ("-e" in options.split(), tuple(sorted(filter(None, extras[:-1].split(",")))))
                found.setdefault(key, []).append(where)
    return found


LINES = install_lines()


def test_the_docs_have_install_lines() -> None:
    extras = {extra for _, group in LINES for extra in group}
    assert {"celery", "dramatiq", "redis", "postgres", "django"} <= extras, extras


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout built once as a wheel, so ``relay-scheduler[...]`` resolves to it."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(folder)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    return folder


@pytest.mark.parametrize(
    ("editable", "extras"),
    list(LINES),
    ids=[("-e ." if e else "relay-scheduler") + (f"[{','.join(x)}]" * bool(x)) for e, x in LINES],
)
def test_an_install_line_gives_a_working_set_up(
    editable: bool, extras: tuple[str, ...], wheelhouse: Path, tmp_path: Path
) -> None:
    needed = {"redis", "rabbitmq"} if {"celery", "dramatiq", "all", "dev"} & set(extras) else set()
    needed |= {name for name in ("redis", "rabbitmq", "postgres") if name in extras}
    if {"all", "dev"} & set(extras):
        needed |= {"postgres"}
    env = {name: services.require(name) for name in sorted(needed)}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    suffix = f"[{','.join(extras)}]" if extras else ""
    target = ["-e", f"{ROOT}{suffix}"] if editable else [f"relay-scheduler{suffix}"]
    # --no-compile: pip's byte-compiling of every installed module is half its CPU time, and
    # cannot fail an install (pip ignores compile errors); the check compiles what it imports.
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    install = [*pip, "install", "-q", "--no-compile"]
    done = subprocess.run(
        [*install, "--find-links", str(wheelhouse), *target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{LINES[(editable, extras)]}: {done.stderr}"
    urls = {services.SERVICES[name].env: url for name, url in env.items()}
    check = subprocess.run(
        [str(python), str(CHECK), *extras],
        cwd=tmp_path,
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", **urls},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, f"{LINES[(editable, extras)]}:\n{check.stdout}\n{check.stderr}"
