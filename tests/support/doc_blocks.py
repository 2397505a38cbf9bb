"""The code blocks of the documentation, and the markers that say how each one is tested.

A fenced block is run by ``tests/test_doc_blocks.py`` unless the line before it (HTML comments,
invisible in the rendered page) says otherwise:

* ``<!-- illustrative -->``: not run (a shell session, a fragment of a larger file, a configuration
  for a system the tests do not run). Any block that is not Python must carry it.
* ``<!-- needs: redis, postgres -->``: run, against the suite's real servers (skipped when one is
  down, failing under ``RELAY_REQUIRE_SERVICES=1``).
* ``<!-- raises: UnsupportedOption -->``: run, and it must raise that exception.

Several may share one comment, separated by ``;``:
``<!-- needs: redis; raises: UnsupportedOption -->``.
A block made only of ``--8<--`` lines includes a tested file (``pymdownx.snippets``); the strict
site build fails if that file is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ROOT", "Block", "blocks", "documents", "run_checked"]

ROOT = Path(__file__).resolve().parents[2]
_RUNNER = Path(__file__).with_name("run_doc_block.py")
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--(.*)-->\s*$")


@dataclass
class Block:
    """One fenced code block: where it is, its language, its text and its markers."""

    path: Path
    line: int
    language: str
    text: str
    markers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``docs/celery.md:17``: a test id that leads to the block."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def illustrative(self) -> bool:
        """Marked as not run."""
        return "illustrative" in self.markers

    @property
    def snippet(self) -> bool:
        """Only includes other files."""
        lines = [line for line in self.text.splitlines() if line.strip()]
        return bool(lines) and all(line.strip().startswith("--8<--") for line in lines)


def documents() -> list[Path]:
    """The README, every page under docs/, and the examples' READMEs."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return pages + sorted((ROOT / "examples").rglob("*.md"))


def _markers(lines: list[str], fence_index: int) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    index = fence_index - 1
    while index >= 0 and (match := _MARKER.match(lines[index])):
        for part in match.group(1).split(";"):
            key, _, values = part.partition(":")
            found[key.strip()] = [v.strip() for v in values.split(",") if v.strip()]
        index -= 1
    return found


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence, language = match.groups()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(line[len(indent) :] for line in lines[index + 1 : end])
        found.append(Block(path, index + 1, language, body, _markers(lines, index)))
        index = end + 1
    return found


def run_checked(
    script: Path, cwd: Path, *, raises: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Python file with ``run_doc_block.py`` in a fresh interpreter; its output, checked."""
    paths = [str(ROOT), *(env or {}).pop("PYTHONPATH", "").split(os.pathsep)]
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.run(
        [sys.executable, str(_RUNNER), str(script), *([raises] if raises else [])],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
