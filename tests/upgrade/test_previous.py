"""Which previous release the upgrade tests build, and what they do where they cannot build it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upgrade import previous
from tests.upgrade.previous import RECORD, previous_release


def test_the_recorded_commit_is_the_one_the_tag_names() -> None:
    """A checkout with the tag uses it; the record must name the same commit, or a clone without
    tags (CI's) would test another release."""
    tag, commit = RECORD.read_text().split()
    found = previous_release()
    assert (found.tag, found.commit) == (tag, commit)


def test_history_without_the_commit_skips_and_fails_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "previous_release.txt"
    record.write_text(f"v0.0.9 {'0' * 40}\n")
    monkeypatch.setattr(previous, "RECORD", record)
    monkeypatch.delenv("RELAY_REQUIRE_SERVICES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="git fetch --unshallow --tags"):
        previous_release()
    monkeypatch.setenv("RELAY_REQUIRE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match="RELAY_REQUIRE_SERVICES=1 but this checkout"):
        previous_release()


def test_a_source_tree_without_git_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(previous, "ROOT", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.delenv("RELAY_REQUIRE_SERVICES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="is not a git checkout"):
        previous_release()
