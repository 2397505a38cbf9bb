"""The stored-schedule pages of the admin, through Django's test client: the checks of
``Control.add_schedule`` on the form, the permissions, CSRF and conflicting edits.

Each test gives a list of requests (user, method, path, data, CSRF checked or not) to one
``manage.py shell`` process, which makes them in order and prints what came back; the test then
reads the store through :class:`relay.Control`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from relay import Control, open_backend
from relay.health import InstanceInfo
from tests.django_app.support import manage, site_env

UTC = timezone.utc
PAGES = "/admin/relay/schedule/"
BY = "editor (Django admin)"

VISITS = """
import json, os
from django.contrib.auth.models import Permission, User
from django.test import Client
def make(name, codenames):
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="relay", codename__in=codenames))
if not User.objects.exists():
    make("editor", ["view_schedule", "change_schedule"])
    make("viewer", ["view_schedule"])
    make("outsider", [])
out, clients = [], {}
for user, method, path, data, csrf in json.loads(os.environ["RELAY_T_VISITS"]):
    client = clients.get((user, csrf))
    if client is None:  # one per user (and CSRF check): its session keeps its messages
        client = clients[user, csrf] = Client(enforce_csrf_checks=csrf != "off")
        if user:
            client.force_login(User.objects.get(username=user))
    if method == "get":
        response = client.get(path)
    else:
        if csrf == "token":
            client.get(path)
            data = {**data, "csrfmiddlewaretoken": client.cookies["csrftoken"].value}
        response = client.post(path, data)
    out.append([response.status_code, response.content.decode(), response.get("Location", "")])
print(json.dumps(out))
"""


NOW = datetime(2026, 1, 2, tzinfo=UTC)
BAD = [
    ({"cron": "99 * * * *"}, "cron"),
    ({"cron": "* * * * *", "tz": "Mars/Base"}, "tz"),
    ({"every": -1}, "every"),
    ({}, "cron"),  # no schedule at all: the first kind it names
    ({"every": 5, "max_runs": 0}, "max_runs"),
    ({"every": 5, "start": NOW, "end": NOW.replace(day=1)}, "end"),
    ({"every": 5, "args": "x"}, "args"),
    ({"every": 5, "kwargs": [1]}, "kwargs"),
    ({"every": 5, "overlap": "bogus"}, "overlap"),
    ({"every": 5, "jitter": -1}, "jitter"),
    ({"every": 5, "catch_up": -3}, "catch_up"),
    ({"every": 5, "max_attempts": 0}, "max_attempts"),
    ({"every": 5, "stale_after": 0}, "stale_after"),
    ({"every": 5, "options": {"a": {1, 2}}}, "options"),
    ({"every": 5, "start": NOW.replace(tzinfo=None)}, "start"),
    ({"at": NOW, "cron": "* * * * *"}, "at"),
    ({"every": 5, "task": "a@b"}, "task"),
    ({"every": 5, "name": "a@b"}, "name"),
]


@pytest.mark.parametrize(("given", "field"), BAD)
def test_each_error_of_relay_is_shown_on_its_field(
    given: dict[str, Any], field: str, tmp_path: Path
) -> None:
    from relay.contrib.django.forms import ScheduleForm, field_of
    from relay.errors import ConfigurationError
    from relay.stored import check_schedule

    values = {"name": "a", "task": "echo", **given}
    store = open_backend(f"sqlite:///{tmp_path / 'relay.db'}")
    try:
        with pytest.raises(ConfigurationError) as refused:
            check_schedule(store, values.pop("name"), values.pop("task"), **values)
    finally:
        store.close()
    assert field_of(str(refused.value), tuple(ScheduleForm.base_fields)) == field, refused.value


def allow(url: str, *tasks: str) -> None:
    """Record a live instance in the store that allows ``tasks``."""
    store = open_backend(url)
    assert store.capability == "lease"
    started = datetime.now(UTC)
    store.record_instance(
        InstanceInfo("host:1", "scheduler", "host", 1, started, "0", 3600.0, tasks=tasks), 36000
    )
    store.close()


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Any]:
    """A migrated test site whose store is its own database, with a live instance allowing
    ``echo``."""
    db = tmp_path / "db.sqlite3"
    env = site_env(db, RELAY={"BACKEND": "django"}, ALLOWED_HOSTS=["testserver"])
    assert manage(env, "migrate", "-v", "0").returncode == 0
    url = f"sqlite:///{db}"
    allow(url, "echo")
    return {"env": env, "url": url}


def visit(env: dict[str, str], *requests: tuple[Any, ...]) -> list[tuple[int, str, str]]:
    """Make ``requests`` (user, method, path[, data[, csrf]]) in order: (status, body, location)
    each. ``csrf``: ``"off"`` (the test client's default), ``"none"`` (checked, no token sent)
    or ``"token"`` (checked, the token from a GET of the same page sent)."""
    full = [(u, m, p, d or {}, c or "off") for u, m, p, d, c in (_five(r) for r in requests)]
    done = manage({**env, "RELAY_T_VISITS": json.dumps(full)}, "shell", "-c", VISITS)
    assert done.returncode == 0, done.stderr
    return [tuple(r) for r in json.loads(done.stdout.splitlines()[-1])]  # type: ignore[misc]


def _five(request: tuple[Any, ...]) -> tuple[Any, Any, Any, Any, Any]:
    user, method, path, data, csrf = (*request, None, None)[:5]
    return user, method, path, data, csrf


def form(**values: Any) -> dict[str, Any]:
    """An add/edit form's fields: ``every=60`` of task ``echo`` unless given."""
    fields = {"task": "echo", "every": "60", "args": "[]", "kwargs": "{}", "options": "{}",
              "overlap": "allow", "enabled": "on"}  # fmt: skip
    fields.update(values)
    return {k: v for k, v in fields.items() if v is not None}


def errors_of(body: str, field: str) -> str:
    """The text of the error list above ``field`` on a form page ('' if none)."""
    start = body.find(f'class="form-row field-{field} errors"')
    if start < 0:
        return ""
    return body[start : body.find("</ul>", start)]


def test_the_form_checks_like_control_add_schedule_field_by_field(site: dict[str, Any]) -> None:
    add = PAGES + "add/"
    swapped = form(name="a", start="2026-01-02T00:00:00Z", end="2026-01-01T00:00:00Z")
    daily = form(name="a", cron="0 3 * * *", every="", tz="Europe/Paris", kwargs='{"to": "ops"}',
                 max_runs="5")  # fmt: skip
    bad_cron, bad_args, unknown, late, forced, done = visit(
        site["env"],
        ("editor", "post", add, form(name="a", every="", cron="99 * * * *")),
        ("editor", "post", add, form(name="a", args="[1,")),
        ("editor", "post", add, form(name="a", task="nope")),
        ("editor", "post", add, swapped),
        ("editor", "post", add, form(name="b", task="nope", force="on")),
        ("editor", "post", add, daily),
    )
    assert bad_cron[0] == 200 and "minute field" in errors_of(bad_cron[1], "cron")
    assert bad_args[0] == 200 and "is not JSON" in errors_of(bad_args[1], "args")
    assert unknown[0] == 200 and "allow: echo" in errors_of(unknown[1], "task")
    assert late[0] == 200 and "swap them" in errors_of(late[1], "end")
    assert (forced[0], done[0]) == (302, 302), (forced[1], done[1])
    with Control(site["url"], read_only=True) as control:
        stored = {s.name: s for s in control.schedules()}
    assert sorted(stored) == ["a", "b"]
    a = stored["a"]
    assert (a.cron, a.tz, a.every, dict(a.kwargs), a.max_runs) == (
        "0 3 * * *", "Europe/Paris", None, {"to": "ops"}, 5,
    )  # fmt: skip
    assert (a.version, a.updated_by) == (1, BY)
    # The list shows it as `relay jobs` does: runnable on the live instance, 5 slots left.
    ((status, body, _),) = visit(site["env"], ("viewer", "get", PAGES))
    assert status == 200 and 'data-schedule="a"' in body
    assert "task echo, on 1 live instance(s); 5 slot(s) left" in body
    # No instance registered it yet: its next run is its definition's next slot.
    a_row = body.split('data-schedule="a"')[1].split("</tr>")[0]
    assert '<td class="relay-next">20' in a_row
    assert "not runnable: no live instance allows task nope" in body


def test_only_users_with_the_permission_change_schedules(site: dict[str, Any]) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("a", "echo", every=60, by="ann")
    edit, delete, history = PAGES + "a/change/", PAGES + "a/delete/", PAGES + "a/history/"
    toggle = {"name": "a", "version": "1", "enabled": "0"}
    answers = visit(
        site["env"],
        (None, "get", PAGES),
        ("outsider", "get", PAGES), ("outsider", "get", history),
        ("outsider", "post", PAGES, toggle),
        ("viewer", "get", PAGES), ("viewer", "get", history),
        ("viewer", "get", PAGES + "add/"), ("viewer", "post", PAGES + "add/", form(name="v")),
        ("viewer", "get", edit), ("viewer", "post", edit, form(version="1", every="90")),
        ("viewer", "post", PAGES, toggle), ("viewer", "post", delete, {"version": "1"}),
    )  # fmt: skip
    anonymous, *rest = answers
    assert anonymous[0] == 302 and "/admin/login/" in anonymous[2]
    assert [a[0] for a in rest] == [403, 403, 403, 200, 200, 403, 403, 403, 403, 403, 403]
    viewed = rest[3][1]
    assert 'data-schedule="a"' in viewed and "relay-toggle" not in viewed
    assert "relay-add-schedule" not in viewed and "relay.change_schedule" in viewed
    with Control(site["url"], read_only=True) as control:
        (a,) = control.schedules()
        assert (a.version, a.enabled, a.every) == (1, True, 60.0)
        assert [c.version for c in control.schedule_history("a")] == [1]


def test_changes_need_django_csrf_token(site: dict[str, Any]) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("a", "echo", every=60, by="ann")
    toggle = {"name": "a", "version": "1", "enabled": "0"}
    refused = visit(
        site["env"],
        ("editor", "post", PAGES + "add/", form(name="b"), "none"),
        ("editor", "post", PAGES, toggle, "none"),
        ("editor", "post", PAGES + "a/change/", form(version="1", every="90"), "none"),
        ("editor", "post", PAGES + "a/delete/", {"version": "1"}, "none"),
    )
    assert [(r[0], "CSRF verification failed" in r[1]) for r in refused] == [(403, True)] * 4
    with Control(site["url"], read_only=True) as control:
        assert [(s.name, s.version) for s in control.schedules()] == [("a", 1)]
    (accepted,) = visit(site["env"], ("editor", "post", PAGES + "add/", form(name="b"), "token"))
    assert accepted[0] == 302
    with Control(site["url"], read_only=True) as control:
        assert [s.name for s in control.schedules()] == ["a", "b"]


def test_a_stale_edit_is_refused_naming_who_changed_it_and_when(site: dict[str, Any]) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("a", "echo", every=60, by="ann")
        control.update_schedule("a", version=1, every=120, by="bob")
        changed_at = control.schedule("a").updated_at
    assert changed_at is not None
    stale_edit, stale_toggle, stale_delete, page = visit(
        site["env"],
        ("editor", "post", PAGES + "a/change/", form(version="1", every="90")),
        ("editor", "post", PAGES, {"name": "a", "version": "1", "enabled": "0"}),
        ("editor", "post", PAGES + "a/delete/", {"version": "1"}),
        ("editor", "get", PAGES),  # shows the messages of the last two
    )
    assert stale_edit[0] == 200
    assert "at version 2" in stale_edit[1] and "by bob" in stale_edit[1]
    assert changed_at.isoformat(timespec="seconds") in stale_edit[1]
    assert 'id="relay-reload"' in stale_edit[1]
    assert (stale_toggle[0], stale_delete[0]) == (302, 302)
    assert page[1].count("at version 2") == 2
    with Control(site["url"], read_only=True) as control:
        a = control.schedule("a")
        assert (a.version, a.every, a.enabled, a.updated_by) == (2, 120.0, True, "bob")


def test_edit_disable_enable_delete_and_the_history(site: dict[str, Any]) -> None:
    with Control(site["url"]) as control:
        control.add_schedule("a", "echo", every=60, by="ann")
    answers = visit(
        site["env"],
        ("editor", "get", PAGES + "a/change/"),
        ("editor", "post", PAGES + "a/change/", form(version="1", every="15m", description="x")),
        ("editor", "post", PAGES, {"name": "a", "version": "2", "enabled": "0"}),
        ("editor", "post", PAGES, {"name": "a", "version": "3", "enabled": "1"}),
        ("editor", "get", PAGES + "a/delete/"),
        ("editor", "post", PAGES + "a/delete/", {"version": "4"}),
        ("viewer", "get", PAGES + "a/history/"),
        ("viewer", "get", PAGES + "gone/history/"),
    )
    shown, edited, disabled, enabled, ask, deleted, history, unknown = answers
    assert shown[0] == 200 and 'name="version" value="1"' in shown[1]
    assert 'name="every" value="60"' in shown[1]
    assert [a[0] for a in (edited, disabled, enabled, deleted)] == [302] * 4
    assert ask[0] == 200 and 'id="relay-confirm-delete"' in ask[1]
    assert history[0] == 200 and unknown[0] == 404
    rows = history[1].split('<tr class="relay-change"')[1:]
    assert [(r.split('"')[1], r.split('data-by="')[1].split('"')[0]) for r in rows] == [
        ("5", BY), ("4", BY), ("3", BY), ("2", BY), ("1", "ann"),
    ]  # fmt: skip
    assert 'data-field="every"' in rows[3] and "60.0 &rarr; 900.0" in rows[3]
    assert 'data-action="remove"' in rows[0]
    with Control(site["url"], read_only=True) as control:
        assert control.schedules() == []
        changes = control.schedule_history("a")
    assert [(c.version, c.action, c.by) for c in changes] == [
        (1, "add", "ann"), (2, "update", BY), (3, "update", BY), (4, "update", BY),
        (5, "remove", BY),
    ]  # fmt: skip
    assert changes[2].changes == {"enabled": [True, False]}


def test_the_pages_change_schedules_on_every_lease_backend(lease_url: str, tmp_path: Path) -> None:
    allow(lease_url, "echo")
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": lease_url},
                   ALLOWED_HOSTS=["testserver"])  # fmt: skip
    assert manage(env, "migrate", "-v", "0").returncode == 0
    answers = visit(
        env,
        ("editor", "post", PAGES + "add/", form(name="a")),
        ("editor", "post", PAGES + "a/change/", form(version="1", every="90")),
        ("editor", "post", PAGES + "a/change/", form(version="1", every="30")),
        ("editor", "post", PAGES, {"name": "a", "version": "2", "enabled": "0"}),
        ("viewer", "get", PAGES),
        ("viewer", "get", PAGES + "a/history/"),
    )
    _, _, stale, _, listed, history = answers
    assert [a[0] for a in answers] == [302, 302, 200, 302, 200, 200]
    assert "at version 2" in stale[1] and f"by {BY}" in stale[1]
    assert 'data-schedule="a"' in listed[1] and "paused (enabled=False)" in listed[1]
    assert history[1].count('class="relay-change"') == 3
    with Control(lease_url, read_only=True) as control:
        a = control.schedule("a")
        assert (a.version, a.every, a.enabled, a.updated_by) == (3, 90.0, False, BY)
    (deleted,) = visit(env, ("editor", "post", PAGES + "a/delete/", {"version": "3"}))
    assert deleted[0] == 302
    with Control(lease_url, read_only=True) as control:
        assert control.schedules() == []
        assert [c.action for c in control.schedule_history("a")] == [
            "add", "update", "update", "remove",
        ]  # fmt: skip


def test_a_name_with_slashes_spaces_and_a_question_mark_has_its_pages(
    site: dict[str, Any],
) -> None:
    name = "reports/daily run?x=1"
    with Control(site["url"]) as control:
        control.add_schedule(name, "echo", every=60, by="ann")
    ((_, listed, _),) = visit(site["env"], ("editor", "get", PAGES))
    links = [part.split('"')[0] for part in listed.split('href="')[1:]]
    pages = [link for link in links if "/admin/relay/schedule/reports" in link]
    assert sorted(p.rsplit("/", 2)[-2] for p in pages) == ["change", "delete", "history"]
    answers = visit(site["env"], *(("editor", "get", page) for page in pages))
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert all("reports/daily run?x=1" in body for _, body, _ in answers)
    edit = next(page for page in pages if page.endswith("/change/"))
    (saved,) = visit(site["env"], ("editor", "post", edit, form(version="1", every="90")))
    assert saved[0] == 302
    with Control(site["url"], read_only=True) as control:
        assert (control.schedule(name).version, control.schedule(name).every) == (2, 90.0)


def test_the_permission_models_match_their_migrations(site: dict[str, Any]) -> None:
    done = manage(site["env"], "makemigrations", "relay", "--check", "--dry-run")
    assert done.returncode == 0 and "No changes detected" in done.stdout, done.stdout + done.stderr
    listed = manage(site["env"], "shell", "-c", "from django.contrib.auth.models import Permission;"
                    "print(sorted(Permission.objects.filter(content_type__app_label='relay')"
                    ".values_list('codename', flat=True)))")  # fmt: skip
    assert "'change_schedule', 'control_job', 'view_job', 'view_run', 'view_schedule'" in (
        listed.stdout
    )
