"""The admin pages read Relay's store through the lease contract: they work on every lease backend.

Each backend's real server holds a few runs; Django's test client, logged in as a superuser in a
``manage.py shell`` process, reads the jobs, runs and timeline pages.
"""

from __future__ import annotations

import json
from pathlib import Path

from relay import AcquireRequest, open_backend
from tests.django_app.support import manage, site_env

PAGES = """
import json
from django.contrib.auth.models import User
from django.test import Client
User.objects.create_superuser("root", "root@example.com", "pw")
client = Client()
client.force_login(User.objects.get(username="root"))
out = {}
for name, url in (("jobs", "/admin/relay/job/"), ("runs", "/admin/relay/run/"),
                  ("timeline", "/admin/relay/run/timeline/")):
    response = client.get(url)
    out[name] = [response.status_code, response.content.decode()]
print(json.dumps(out))
"""


def test_the_admin_pages_read_every_lease_backend(lease_url: str, tmp_path: Path) -> None:
    store = open_backend(lease_url)
    assert store.capability == "lease"
    slot = store.now().replace(microsecond=0)
    won = store.acquire(AcquireRequest("nightly", slot, "host-a:1:ab", 30)).run
    assert won is not None
    store.start(won.id, won.token, won.owner, 30)
    store.finish(won.id, won.token, succeeded=False, error="disk full")
    store.close()
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": lease_url}, ALLOWED_HOSTS=["*"])
    assert manage(env, "migrate", "-v", "0").returncode == 0
    done = manage(env, "shell", "-c", PAGES)
    assert done.returncode == 0, done.stderr
    pages = json.loads(done.stdout.splitlines()[-1])
    assert {name: status for name, (status, _) in pages.items()} == {
        "jobs": 200, "runs": 200, "timeline": 200,
    }  # fmt: skip
    assert 'data-job="nightly"' in pages["jobs"][1] and "host-a:1:ab" in pages["jobs"][1]
    assert f'data-run="{won.id}"' in pages["runs"][1] and "disk full" in pages["runs"][1]
    assert f'data-run="{won.id}"' in pages["timeline"][1] and "s-failed" in pages["timeline"][1]
