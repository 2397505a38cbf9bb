"""``relay timeline``: reads any lease store (on its real server) into one page, writes nothing;
stored schedules are lanes, their edits marks."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from relay import AcquireRequest, Control, open_backend
from relay.cli import main
from relay.schedule_store import stores_schedules
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
    assert result.exit_code == 2 and "neither a duration" in result.output


def test_timeline_draws_stored_schedules_and_their_edits_on_every_lease_backend(
    lease_url: str, tmp_path: Path
) -> None:
    backend = open_backend(lease_url)
    assert backend.capability == "lease"
    control = Control(backend)
    control.add_schedule("billing", "invoice", every=3600, force=True, by="ann")
    slot = backend.now().replace(microsecond=0) - timedelta(minutes=1)
    won = backend.acquire(AcquireRequest("billing", slot, "host-a:1:ab", 30)).run
    assert won is not None
    backend.finish(won.id, won.token, succeeded=True)
    control.update_schedule("billing", version=1, every=1800, by="ann")
    control.update_schedule("billing", version=2, enabled=False, by="bob")
    control.update_schedule("billing", version=3, enabled=True, by="bob")
    control.remove_schedule("billing", version=4, by="cy")
    control.add_schedule("fresh", "invoice", cron="0 3 * * *", force=True, by="ann")
    assert stores_schedules(backend)
    before = (backend.schedule_changes(0), backend.schedule_history("billing"))
    backend.close()

    out = tmp_path / "timeline.html"
    result = CliRunner().invoke(main, ["timeline", "--backend", lease_url, "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 run of 2 jobs" in result.output and "2 stored schedules, 6 edits" in result.output
    page = out.read_text()
    billing = page.split('data-job="billing"')[1].split("</g></g>")[0]
    assert f'data-run="{won.id}"' in page  # the removed schedule's lane keeps its run
    kinds = [part.split('"')[0] for part in billing.split('data-edit="')[1:]]
    assert kinds == ["add", "edit", "pause", "resume", "remove"]
    assert "remove v5 at" in billing and "by cy" in billing
    assert "stored · invoice (removed)" in page and 'data-job="fresh"' in page

    reopened = open_backend(lease_url)  # the timeline wrote nothing
    assert stores_schedules(reopened)
    after = (reopened.schedule_changes(0), reopened.schedule_history("billing"))
    reopened.close()
    assert after == before
