"""The admin index lists every Relay page the Django docs list: Jobs, Runs, Timeline and Stored
schedules, each to the users whose permission shows it (through Django's test client, in one
``manage.py shell`` process)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.django_app.support import manage, site_env

VISITS = """
import json
from django.contrib.auth.models import Permission, User
from django.test import Client
out = []
for name, codenames in [("runs", ["view_run"]), ("schedules", ["view_schedule"])]:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="relay", codename__in=codenames))
    client = Client()
    client.force_login(user)
    for path in ("/admin/", "/admin/relay/", "/admin/relay/timeline/"):
        response = client.get(path)
        out.append([name, path, response.status_code, response.content.decode(),
                    response.get("Location", "")])
print(json.dumps(out))
"""


def test_the_admin_index_links_the_timeline_for_those_who_may_view_runs(tmp_path: Path) -> None:
    env = site_env(
        tmp_path / "db.sqlite3", RELAY={"BACKEND": "django"}, ALLOWED_HOSTS=["testserver"]
    )
    assert manage(env, "migrate", "-v", "0").returncode == 0
    done = manage(env, "shell", "-c", VISITS)
    assert done.returncode == 0, done.stderr
    seen = {(user, path): (status, body, to) for user, path, status, body, to in
            json.loads(done.stdout.splitlines()[-1])}  # fmt: skip
    for path in ("/admin/", "/admin/relay/"):
        status, body, _ = seen["runs", path]
        assert status == 200, body
        assert 'href="/admin/relay/timeline/"' in body and ">Timeline<" in body
        assert 'href="/admin/relay/run/"' in body
        status, body, _ = seen["schedules", path]
        assert status == 200 and 'href="/admin/relay/schedule/"' in body
        assert "/admin/relay/timeline/" not in body  # runs are not theirs to see
    status, _, to = seen["runs", "/admin/relay/timeline/"]
    assert (status, to) == (302, "/admin/relay/run/timeline/")
    assert seen["schedules", "/admin/relay/timeline/"][0] == 403
