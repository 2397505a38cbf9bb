"""The admin's jobs page lists overdue and failing jobs first, with their last success and when
a success is next expected (:mod:`relay.overdue`)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from relay import AcquireRequest, open_backend
from tests.django_app.support import manage, site_env
from tests.django_app.test_admin_backends import PAGES

EVERY_MINUTE = '{"every": 60.0, "schedule": "every 60s"}'


def test_the_jobs_page_puts_the_overdue_job_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    store = open_backend(url)
    assert store.capability == "lease"
    store.register_jobs({"a-fine": EVERY_MINUTE, "z-late": EVERY_MINUTE})
    now = store.now()
    for job, ago in (("a-fine", 0), ("z-late", 3600)):
        slot = (now - timedelta(seconds=ago)).replace(second=0, microsecond=0)
        won = store.acquire(AcquireRequest(job, slot, "host-a:1", 30)).run
        assert won is not None
        store.start(won.id, won.token, won.owner, 30)
        store.finish(won.id, won.token, succeeded=True)
    store.close()
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url}, ALLOWED_HOSTS=["*"])
    assert manage(env, "migrate", "-v", "0").returncode == 0
    done = manage(env, "shell", "-c", PAGES)
    assert done.returncode == 0, done.stderr
    status, page = json.loads(done.stdout.splitlines()[-1])["jobs"]
    assert status == 200
    assert page.index('data-job="z-late"') < page.index('data-job="a-fine"')
    late = page[page.index('data-job="z-late"') : page.index('data-job="a-fine"')]
    assert 'class="relay-health-overdue">overdue<' in late
    assert "not succeeded by" in late  # the detail, as the cell's title
    fine = page[page.index('data-job="a-fine"') :]
    assert 'class="relay-health-ok">ok<' in fine
