"""``relay timeline``: reads any lease store (on its real server) into one page, writes nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from relay import AcquireRequest, open_backend
from relay.cli import main
from tests.test_cli_read_only import named_store, store_exists


def test_timeline_draws_each_run_of_each_job_on_every_lease_backend(
    lease_url: str, tmp_path: Path
) -> None:
    backend = open_backend(lease_url)
    assert backend.capability == "lease"
    slot = backend.now().replace(microsecond=0) - timedelta(minutes=5)
    ids = []
    for job, minutes in (("nightly", 0), ("nightly", 1), ("hourly", 2)):
        won = backend.acquire(
            AcquireRequest(job, slot + timedelta(minutes=minutes), "host-a:1:ab", 30)
        ).run
        assert won is not None
        backend.start(won.id, won.token, won.owner, 30)
        backend.finish(won.id, won.token, succeeded=True)
        ids.append(won.id)
    backend.skip("nightly", slot + timedelta(minutes=3), "missed")
    backend.close()

    out = tmp_path / "timeline.html"
    result = CliRunner().invoke(main, ["timeline", "--backend", lease_url, "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 runs of 2 jobs" in result.output and str(out) in result.output
    page = out.read_text()
    assert all(f'data-run="{i}"' in page for i in ids)
    assert page.count('class="lane"') == 2 and 'data-marks="missed"' in page

    only = CliRunner().invoke(
        main,
        ["timeline", "--backend", lease_url, "--job", "hourly", "--html", str(out)],
    )
    assert only.exit_code == 0 and "1 run of 1 job" in only.output, only.output
    recent = CliRunner().invoke(
        main, ["timeline", "--backend", lease_url, "--since", "210s", "--html", str(out)]
    )
    assert recent.exit_code == 0 and "2 runs of 2 jobs" in recent.output, recent.output


def test_timeline_of_a_missing_store_fails_and_creates_nothing(
    lease_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "timeline.html"
    result = CliRunner().invoke(main, ["timeline", "--backend", lease_url, "--html", str(out)])
    assert result.exit_code == 1 and named_store(lease_url) in result.output, result.output
    assert not store_exists(lease_url) and not out.exists()


def test_timeline_explains_a_bad_since(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    open_backend(url).close()
    result = CliRunner().invoke(
        main, ["timeline", "--backend", url, "--since", "soon", "--html", str(tmp_path / "t.html")]
    )
    assert result.exit_code == 1 and "neither a duration" in result.output
