"""The web console over Starlette's test client, against SQLite, PostgreSQL and Redis stores with
a live instance running: every page, every action, the forms' errors, and the security rules."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from markupsafe import escape
from starlette.requests import Request
from starlette.testclient import TestClient

from relay import Control
from relay.cli import main as relay_cli
from relay.console import Viewer, asgi_app
from relay.control_schedules import operator
from relay.errors import ConfigurationError
from relay.runs import RunState, format_slot
from tests.console.conftest import csrf_of, wait_for
from tests.console.instance import HOSTILE
from tests.support.backends import postgres_lease

LOCAL = ("127.0.0.1", 40000)
"""A loopback client: the console answers it without an auth hook."""
BY = f"{operator()} (console)"
"""What a change from a loopback client without an auth hook records as ``by``."""


@pytest.fixture
def client(site: dict[str, Any]) -> Iterator[TestClient]:
    app = asgi_app(site["url"])
    with TestClient(app, client=LOCAL) as test_client:
        yield test_client
    app.state.console.close()


def esc(text: str) -> str:
    """``text`` as the console's templates escape it."""
    return str(escape(text))


def path(name: str) -> str:
    return quote(name, safe="")


def errors(page: str) -> list[str]:
    """The errors a page shows (on fields and above the form), unescaped."""
    found = re.findall(r'class="(?:field-error|flash error[^"]*)"[^>]*>(.*?)</', page, re.S)
    return [html.unescape(text).strip() for text in found]


def cli_error(*args: str) -> str:
    """What ``relay ARGS`` prints as its error (after ``Error: ``)."""
    result = CliRunner().invoke(relay_cli, list(args))
    assert result.exit_code != 0, result.output
    return result.output.strip().splitlines()[-1].removeprefix("Error: ")


def test_every_page_shows_the_store_escaped(client: TestClient, site: dict[str, Any]) -> None:
    jobs = client.get("/")
    assert jobs.status_code == 200
    assert esc(HOSTILE) in jobs.text and HOSTILE not in jobs.text
    assert 'data-job="tick"' in jobs.text and "every 1s" in jobs.text
    assert "<script>" not in jobs.text.replace('<script src="/static/console.js" defer>', "")

    job = client.get(f"/jobs/{path(HOSTILE)}")
    assert job.status_code == 200 and esc(HOSTILE) in job.text
    assert "Coming runs" in job.text and 'id="pause-form"' in job.text

    with Control(site["url"]) as control:
        last = control.job("tick").last_run
    assert last is not None
    runs = client.get("/runs", params={"job": "tick"})
    assert f'data-run="{last.id}"' in runs.text or last.state is RunState.RUNNING
    failed = client.get("/runs", params={"job": "tick", "state": "failed"})
    assert 'class="run"' not in failed.text  # tick never fails

    run = client.get(f"/run/{path(last.id)}")
    assert (
        run.status_code == 200
        and "slot due" in run.text
        and f"fencing token {last.token}" in run.text
    )

    instances = client.get("/instances")
    assert "inst-a:" in instances.text and "echo" in instances.text
    assert relay_version() in instances.text

    timeline = client.get("/timeline", params={"job": "tick", "since": "1h"})
    assert 'data-job="tick"' in timeline.text and "<svg" in timeline.text

    assert client.get("/schedules").status_code == 200
    assert "secret" not in "".join(client.get(p).text for p in ("/", "/instances"))


def relay_version() -> str:
    from importlib.metadata import version

    return version("relay-scheduler")


def test_pause_with_a_reason_and_resume_record_the_console_user(
    client: TestClient, site: dict[str, Any]
) -> None:
    page = client.get(f"/jobs/{path(HOSTILE)}")
    reason = "<img src=x onerror=alert(1)> & upgrade"
    done = client.post(
        f"/act/pause/{path(HOSTILE)}", data={"csrf": csrf_of(page.text), "reason": reason}
    )
    assert done.status_code == 200 and "Paused" in done.text
    assert esc(reason) in done.text and reason not in done.text
    with Control(site["url"]) as control:
        status = control.job(HOSTILE)
        assert status.paused and status.paused_by == BY and status.paused_reason == reason
    jobs = client.get("/")
    assert esc(reason) in jobs.text and "paused" in jobs.text

    done = client.post(f"/act/resume/{path(HOSTILE)}", data={"csrf": csrf_of(page.text)})
    assert "Resumed" in done.text
    with Control(site["url"]) as control:
        assert not control.job(HOSTILE).paused


def test_trigger_now_is_run_by_the_live_instance(client: TestClient, site: dict[str, Any]) -> None:
    page = client.get(f"/jobs/{path(HOSTILE)}")
    done = client.post(f"/act/trigger/{path(HOSTILE)}", data={"csrf": csrf_of(page.text)})
    assert "Triggered" in done.text
    with Control(site["url"]) as control:

        def ran() -> bool:
            return any(
                r.state is RunState.SUCCEEDED and "@manual:" in r.id
                for r in control.runs(HOSTILE, 10)
            )

        wait_for(ran, 60, "the manual run")
        manual = next(r for r in control.runs(HOSTILE, 10) if "@manual:" in r.id)
    story = client.get(f"/run/{path(manual.id)}")
    assert "triggered by hand" in story.text and "finished: succeeded" in story.text
    assert f"with token {manual.token}" in story.text


def test_backfill_a_range_and_its_errors_are_the_commands(
    client: TestClient, site: dict[str, Any]
) -> None:
    url = site["url"]
    page = client.get(f"/jobs/{path(HOSTILE)}")
    token = csrf_of(page.text)
    with Control(url) as control:
        now = control.backend.now()  # type: ignore[union-attr]
        before = len(control.runs(HOSTILE, 100))
    start = format_slot((now - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0))
    end = format_slot((now - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0))

    bad = client.post(
        f"/act/backfill/{path(HOSTILE)}", data={"csrf": token, "start": "yesterday", "end": end}
    )
    assert bad.status_code == 400
    said = cli_error("backfill", HOSTILE, "--backend", url, "--start", "yesterday", "--end", end)
    assert said in errors(bad.text)
    future = format_slot(now + timedelta(days=2))
    late = client.post(
        f"/act/backfill/{path(HOSTILE)}", data={"csrf": token, "start": start, "end": future}
    )
    assert late.status_code == 400
    said = cli_error("backfill", HOSTILE, "--backend", url, "--start", start, "--end", future)
    clock = " (the store's clock"  # the store's time differs between the two answers
    assert said.split(clock)[0] in [e.split(clock)[0] for e in errors(late.text)]
    assert 'value="yesterday"' not in late.text and f'value="{future}"' in late.text
    with Control(url) as control:
        assert len(control.runs(HOSTILE, 100)) == before  # nothing written

    done = client.post(
        f"/act/backfill/{path(HOSTILE)}", data={"csrf": token, "start": start, "end": end}
    )
    assert "Backfilled" in done.text and "3 runs created" in done.text


def test_stored_schedules_add_edit_conflict_toggle_history_remove(
    client: TestClient, site: dict[str, Any]
) -> None:
    url, name = site["url"], "report-<b>\"'"
    form = client.get("/schedules/add")
    token = csrf_of(form.text)
    fields = {
        "csrf": token, "name": name, "task": "echo", "every": "1h", "args": '["<i>a</i>"]',
        "kwargs": "{}", "options": "{}", "enabled": "on", "overlap": "allow",
        "description": "<script>alert('d')</script>",
    }  # fmt: skip

    bad = client.post("/schedules/add", data={**fields, "every": "soon"})
    assert bad.status_code == 400
    said = cli_error("schedules", "add", name, "echo", "--backend", url, "--every", "soon")
    assert said in errors(bad.text)
    unknown = client.post("/schedules/add", data={**fields, "task": "nope"})
    assert unknown.status_code == 400 and any("no live instance allows task" in e
                                              for e in errors(unknown.text))  # fmt: skip
    with Control(url) as control:
        assert name not in [s.name for s in control.schedules()]  # nothing written

    added = client.post("/schedules/add", data=fields)
    assert "Added" in added.text and esc(name) in added.text
    assert "<script>alert" not in added.text and "&lt;script&gt;alert" in added.text

    edit = client.get(f"/schedule/edit/{path(name)}")
    assert 'name="version" value="1"' in edit.text
    with Control(url) as control:  # someone else edits first
        control.update_schedule(name, version=1, by="bob@elsewhere", every=7200)
    stale = client.post(
        f"/schedule/edit/{path(name)}", data={**fields, "every": "30m", "version": "1"}
    )
    assert stale.status_code == 409
    assert any("Not saved" in e and "bob@elsewhere" in e for e in errors(stale.text))
    with Control(url) as control:
        assert control.schedule(name).every == 7200  # the other edit stands

    saved = client.post(
        f"/schedule/edit/{path(name)}", data={**fields, "every": "30m", "version": "2"}
    )
    assert "now at version 3" in saved.text
    off = client.post(f"/schedule/disable/{path(name)}", data={"csrf": token, "version": "3"})
    assert "Disabled" in off.text
    stale_toggle = client.post(
        f"/schedule/enable/{path(name)}", data={"csrf": token, "version": "3"}
    )
    assert "Could not change" in stale_toggle.text
    on = client.post(f"/schedule/enable/{path(name)}", data={"csrf": token, "version": "4"})
    assert "Enabled" in on.text

    history = client.get(f"/schedule/history/{path(name)}")
    assert [int(v) for v in re.findall(r'data-version="(\d+)"', history.text)] == [5, 4, 3, 2, 1]
    assert history.text.count(esc(BY)) == 4 and "bob@elsewhere" in history.text

    ask = client.get(f"/schedule/remove/{path(name)}")
    assert 'name="version" value="5"' in ask.text
    gone = client.post(f"/schedule/remove/{path(name)}", data={"csrf": token, "version": "5"})
    assert "Removed" in gone.text
    with Control(url) as control:
        assert name not in [s.name for s in control.schedules()]
        assert control.schedule_history(name)[-1].by == BY


def test_a_stored_schedule_added_in_the_console_runs_on_the_live_instance(
    client: TestClient, site: dict[str, Any]
) -> None:
    token = csrf_of(client.get("/schedules/add").text)
    done = client.post(
        "/schedules/add",
        data={"csrf": token, "name": "echo-1s", "task": "echo", "every": "1", "args": "[7]",
              "enabled": "on", "overlap": "allow"},
    )  # fmt: skip
    assert "Added echo-1s" in done.text
    log = site["folder"] / "inst-a.log"
    wait_for(lambda: log.exists() and "echo-1s@" in log.read_text(), 60, "a run of echo-1s")
    with Control(site["url"]) as control:
        control.remove_schedule("echo-1s")


def test_live_parts_answer_304_until_something_changes(
    client: TestClient, site: dict[str, Any]
) -> None:
    first = client.get("/schedules", params={"fragment": "1"})
    etag = first.headers["etag"]
    assert first.status_code == 200 and "<html" not in first.text
    again = client.get("/schedules", params={"fragment": "1"}, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    with Control(site["url"]) as control:
        control.add_schedule("live-check", "echo", every=3600)
    try:
        changed = client.get(
            "/schedules", params={"fragment": "1"}, headers={"If-None-Match": etag}
        )
        assert changed.status_code == 200 and changed.headers["etag"] != etag
        assert 'data-key="live-check"' in changed.text
    finally:
        with Control(site["url"]) as control:
            control.remove_schedule("live-check")
    page = client.get("/schedules")
    assert 'data-live="/schedules?fragment=1"' in page.text


def test_changes_need_the_session_and_its_csrf_token(
    client: TestClient, site: dict[str, Any]
) -> None:
    token = csrf_of(client.get(f"/jobs/{path('tick')}").text)
    for data in ({}, {"csrf": "forged"}):
        refused = client.post("/act/pause/tick", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
    stranger = TestClient(client.app, client=LOCAL)  # no session cookie
    refused = stranger.post("/act/pause/tick", data={"csrf": token})
    assert refused.status_code == 403
    with Control(site["url"]) as control:
        assert not control.job("tick").paused


def test_without_an_auth_hook_only_loopback_clients_are_answered(site: dict[str, Any]) -> None:
    app = asgi_app(site["url"])
    try:
        remote = TestClient(app, client=("203.0.113.9", 5000))
        assert remote.get("/").status_code == 403
        assert "tick" not in remote.get("/").text
        assert TestClient(app, client=("::1", 5000)).get("/").status_code == 200
    finally:
        app.state.console.close()


def test_the_auth_hook_decides_reading_and_writing(site: dict[str, Any]) -> None:
    def auth(request: Request) -> Viewer | None:
        user = request.headers.get("x-user")
        if user == "ann":
            return Viewer("ann", read=True, write=True)
        if user == "vic":
            return Viewer("vic", read=True, write=False)
        if user == "nob":
            return Viewer("nob", read=False)
        return None

    app = asgi_app(site["url"], auth=auth)
    try:
        remote = TestClient(app, client=("203.0.113.9", 5000))
        assert remote.get("/").status_code == 401
        assert remote.get("/", headers={"x-user": "nob"}).status_code == 403
        viewer = remote.get(f"/jobs/{path('tick')}", headers={"x-user": "vic"})
        assert viewer.status_code == 200 and 'id="pause-form"' not in viewer.text
        refused = remote.post("/act/pause/tick", data={"csrf": "x"}, headers={"x-user": "vic"})
        assert refused.status_code == 403 and "vic may not change" in refused.text
        assert remote.get("/schedules/add", headers={"x-user": "vic"}).status_code == 403
        page = remote.get(f"/jobs/{path('tick')}", headers={"x-user": "ann"})
        done = remote.post(
            "/act/pause/tick", data={"csrf": csrf_of(page.text), "reason": "r"},
            headers={"x-user": "ann"},
        )  # fmt: skip
        assert "Paused tick" in done.text
        with Control(site["url"]) as control:
            assert control.job("tick").paused_by == "ann (console)"
            control.resume("tick")
    finally:
        app.state.console.close()


def test_a_non_loopback_address_is_refused_without_an_auth_hook(site: dict[str, Any]) -> None:
    result = CliRunner().invoke(
        relay_cli, ["console", "--backend", site["url"], "--host", "0.0.0.0", "--port", "1"]
    )
    assert result.exit_code == 1 and "no auth hook" in result.output
    from relay.console import check_listen

    check_listen("127.0.0.1", None)
    check_listen("0.0.0.0", lambda request: None)
    with pytest.raises(ConfigurationError, match="auth hook"):
        check_listen("192.0.2.1", None)


def test_mounted_under_a_path_its_links_keep_the_path(site: dict[str, Any]) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    console = asgi_app(site["url"])
    outer = Starlette(routes=[Mount("/ops/relay", app=console)])
    try:
        page = TestClient(outer, client=LOCAL).get("/ops/relay/")
        assert page.status_code == 200
        assert 'href="/ops/relay/runs"' in page.text
        assert 'data-live="/ops/relay/?fragment=1"' in page.text
        assert 'src="/ops/relay/static/console.js"' in page.text
        script = TestClient(outer, client=LOCAL).get("/ops/relay/static/console.js")
        assert script.status_code == 200 and "If-None-Match" in script.text
    finally:
        console.state.console.close()


def test_wsgi_app_serves_the_same_pages(site: dict[str, Any]) -> None:
    import io

    from relay.console import wsgi_app

    app = wsgi_app(site["url"])
    statuses: list[str] = []
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/instances", "QUERY_STRING": "",
        "SERVER_NAME": "x", "SERVER_PORT": "80", "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "5", "wsgi.input": io.BytesIO(), "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
    }  # fmt: skip
    body = b"".join(app(environ, lambda status, headers, *rest: statuses.append(status)))
    assert statuses == ["200 OK"] and b"inst-a:" in body


@pytest.mark.postgres
def test_no_page_shows_the_store_urls_password(tmp_path: Path) -> None:
    password = "hunter2-secret"
    with postgres_lease(tmp_path) as url:
        assert url.startswith("postgresql://postgres@"), url
        secret_url = url.replace("postgres@", f"postgres:{password}@", 1)
        with Control(secret_url) as control:  # the store exists, with a job
            control.backend.register_jobs({"tick": '{"every": 60, "schedule": "every 60s"}'})  # type: ignore[union-attr]
        missing = secret_url.replace("schema=", "schema=none_", 1)
        for store in (secret_url, missing):
            app = asgi_app(store)
            try:
                local = TestClient(app, client=LOCAL)
                paths = ["/", "/runs", "/instances", "/timeline", "/schedules", "/jobs/tick"]
                pages = [local.get(p).text for p in [*paths, "/run/tick@2026-01-01T00:00:00Z"]]
                assert all(password not in page for page in pages)
                shown = "none_" in " ".join(pages)
                assert shown == (store == missing)  # the missing store's error is shown
            finally:
                app.state.console.close()


def test_the_jobs_page_reads_one_page_at_a_time(tmp_path: Path) -> None:
    from relay import open_backend
    from relay.console import pages

    url = f"sqlite:///{tmp_path / 'many.db'}"
    store = open_backend(url)
    names = [f"job-{n:03d}" for n in range(pages.PAGE * 2 + 5)]
    store.register_jobs({name: '{"every": 60, "schedule": "every 60s"}' for name in names})  # type: ignore[union-attr]
    store.close()
    app = asgi_app(url)
    try:
        local = TestClient(app, client=LOCAL)
        shown: list[str] = []
        page = local.get("/")
        while True:
            shown += re.findall(r'data-job="([^"]+)"', page.text)
            after = re.search(r'href="\?q=&amp;after=([^"]+)" class="next"', page.text)
            if not after:
                break
            page = local.get(f"/?after={after[1]}")
        assert shown == names
        found = local.get("/", params={"q": "job-1"})
        shown = re.findall(r'data-job="([^"]+)"', found.text)
        assert shown == [n for n in names if n.startswith("job-1")]
    finally:
        app.state.console.close()


def test_a_poll_sets_no_cookie_and_keeps_the_message_for_the_page(client: TestClient) -> None:
    token = csrf_of(client.get("/schedules/add").text)
    cookie = client.cookies["relay_console"]
    done = client.post(
        "/schedule/enable/none-such", data={"csrf": token, "version": "1"}, follow_redirects=False
    )
    assert done.status_code == 303
    polled = client.get("/schedules", params={"fragment": "1"})
    assert "set-cookie" not in polled.headers and client.cookies["relay_console"] != cookie
    page = client.get("/schedules")
    assert "Could not change none-such" in page.text  # the poll left the message in place


def test_the_runs_page_pages_and_filters(tmp_path: Path) -> None:
    from relay import open_backend
    from relay.console import pages

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_backend(url)
    start = store.now().replace(microsecond=0) - timedelta(hours=3)  # type: ignore[union-attr]
    slots = [start + timedelta(minutes=n) for n in range(pages.PAGE * 2 + 20)]
    store.skip_many([("a", slot) for slot in slots], "missed")  # type: ignore[union-attr]
    store.close()
    app = asgi_app(url)
    try:
        local = TestClient(app, client=LOCAL)
        ids = [re.findall(r'data-run="([^"]+)"', local.get("/runs", params={"page": n}).text)
               for n in (1, 2, 3)]  # fmt: skip
        assert [len(i) for i in ids] == [pages.PAGE, pages.PAGE, 20]
        assert [i for part in ids for i in part] == [f"a@{format_slot(s)}" for s in reversed(slots)]
        assert (
            "page=2" in local.get("/runs").text and "page=4" not in local.get("/runs?page=3").text
        )
        since = format_slot(slots[-10])
        recent = local.get("/runs", params={"since": since, "state": "skipped"})
        assert len(re.findall(r'data-run="', recent.text)) == 10 and "10 run(s)" in recent.text
        assert 'data-run="' not in local.get("/runs", params={"state": "failed"}).text
    finally:
        app.state.console.close()


def test_the_command_names_a_bad_auth_hook(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    for hook, said in (("nocolon", "is not module:function"), ("no.such:hook", "cannot import")):
        result = CliRunner().invoke(relay_cli, ["console", "--backend", url, "--auth", hook])
        assert result.exit_code == 2 and said in result.output, result.output
    assert not (tmp_path / "x.db").exists()  # nothing was opened


def test_an_open_backend_object_is_used_and_left_open(site: dict[str, Any]) -> None:
    from relay import open_backend

    store = open_backend(site["url"])
    app = asgi_app(store)  # type: ignore[arg-type]
    try:
        local = TestClient(app, client=LOCAL)
        assert 'data-job="tick"' in local.get("/").text
        token = csrf_of(local.get("/jobs/tick").text)
        assert "Paused tick" in local.post("/act/pause/tick", data={"csrf": token}).text
        app.state.console.close()
        assert store.runs("tick", 1)  # still open: the caller's to close
        assert local.post("/act/resume/tick", data={"csrf": token}).status_code == 200
    finally:
        store.close()
    with Control(site["url"]) as control:
        assert not control.job("tick").paused
