"""Every code block of the docs runs, or is marked illustrative (tests/support/doc_blocks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import services
from tests.support.doc_blocks import ROOT, Block, blocks, documents, run_checked

ALL = [block for page in documents() for block in blocks(page)]
RUN = [block for block in ALL if not block.illustrative and not block.snippet]
MARKERS = {"illustrative", "needs", "raises"}
# The URLs the docs write for the suite's servers, replaced by the suite's own when they differ.
DOC_URLS = {
    "redis": ("redis://localhost:6379/0", "redis://127.0.0.1:6379/0"),
    "postgres": ("postgresql://postgres@127.0.0.1:5432/test",),
    "rabbitmq": ("amqp://guest:guest@127.0.0.1:5672/%2F",),
    "nats": ("nats://127.0.0.1:4222",),
}


def test_the_docs_have_blocks_to_check() -> None:
    assert len(ALL) > 40 and len(RUN) >= 6 and len(SNIPPETS) >= 8


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.name)
def test_a_block_is_python_or_marked_illustrative(block: Block) -> None:
    unknown = set(block.markers) - MARKERS
    assert not unknown, f"{block.name}: unknown marker(s) {unknown}; known: {sorted(MARKERS)}"
    if block.illustrative or block.snippet:
        return
    assert block.language == "python", (
        f"{block.name}: a ```{block.language or '(no language)'} block is not run by the tests; "
        "put <!-- illustrative --> on the line before it, or make it a Python block that runs"
    )
    compile(block.text, block.name, "exec")
    for name in block.markers.get("needs", []):
        assert name in services.SERVICES, f"{block.name}: unknown service {name!r}"


SNIPPETS = [block for block in ALL if block.snippet]
TESTS_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))


@pytest.mark.parametrize("block", SNIPPETS, ids=lambda b: b.name)
def test_an_included_file_exists_and_a_test_exercises_it(block: Block) -> None:
    for line in block.text.split("\n"):
        included = Path(line.split('"')[1])
        assert (ROOT / included).is_file(), f"{block.name}: {included} does not exist"
        folder = included.parent.name
        names = {str(included), included.stem if folder == "examples" else folder}
        assert any(name in TESTS_TEXT for name in names), (
            f"{block.name}: no test names {included}; include only tested files"
        )


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_a_python_block_runs(block: Block, tmp_path: Path) -> None:
    source = block.text
    for name in block.markers.get("needs", []):
        url = services.require(name)
        for written in DOC_URLS.get(name, ()):
            source = source.replace(written, url)
    script = tmp_path / "block.py"
    script.write_text(source, encoding="utf-8")
    raises = block.markers.get("raises", [None])[0]
    done = run_checked(script, tmp_path, raises=raises)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout}\n{done.stderr}"
