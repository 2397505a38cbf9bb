"""Each include of a file in the docs (``--8<-- "examples/…"``) is readable where the Markdown is
read directly, on GitHub: a link to the file stands above it, and resolves from the page's folder.
On the site the file itself is shown, and the link is its name (``docs/hooks/repo_files.py``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$')
LINK = re.compile(r"^\[`([^`]+)`\]\(([^)]+)\)$")


def includes() -> list[tuple[Path, int, str]]:
    """Each include line of the docs: its page, line number and file."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines()):
            match = INCLUDE.match(line)
            if match:
                found.append((page, number, match[1]))
    return found


def test_every_include_has_a_link_to_its_file_above_it() -> None:
    found = includes()
    assert len(found) >= 10, "the docs include the examples' files"
    for page, number, included in found:
        lines = page.read_text(encoding="utf-8").splitlines()
        assert lines[number - 1].startswith("```"), (page, number)
        link = LINK.match(lines[number - 3])
        where = f"{page.relative_to(ROOT)}:{number + 1}"
        assert link and link[1] == included, f"{where}: no link to {included} above the include"
        assert (page.parent / link[2]).resolve() == (ROOT / included).resolve(), where
        assert (ROOT / included).is_file(), where


def test_the_site_shows_a_link_to_a_repository_file_as_its_name() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("repo_files", ROOT / "docs/hooks/repo_files.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)

    class File:
        src_path = "migrate/celery-beat.md"

    class Page:
        file = File()

    text = (
        "[`examples/migrate/celery_beat.py`](../../examples/migrate/celery_beat.py)\n"
        "[Claim or lease](../claim-or-lease.md) [gone](../../examples/none.py)"
    )
    shown = hook.on_page_markdown(text, page=Page(), config={"docs_dir": str(ROOT / "docs")})
    assert shown.splitlines()[0] == "`examples/migrate/celery_beat.py`"
    # A page of the docs, and a file that does not exist, are left for MkDocs to check.
    assert shown.splitlines()[1] == text.splitlines()[1]
