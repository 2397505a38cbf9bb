"""``manage.py check`` reports bad Relay settings with Relay's messages, and a store it cannot
reach as a warning; it never creates the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relay import open_backend
from tests.django_app.support import manage, site_env


def check(tmp_path: Path, **settings: Any) -> tuple[int, str]:
    done = manage(site_env(tmp_path / "db.sqlite3", **settings), "check")
    return done.returncode, done.stdout + done.stderr


def test_good_settings_and_a_reachable_store_pass(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    open_backend(url).close()
    status, output = check(tmp_path, RELAY={"BACKEND": url, "LEASE": 30, "HEARTBEAT": 10})
    assert status == 0 and "no issues" in output, output


def test_a_store_not_created_yet_is_fine_and_still_not_created(tmp_path: Path) -> None:
    status, output = check(tmp_path, RELAY={"BACKEND": f"sqlite:///{tmp_path / 'relay.db'}"})
    assert status == 0 and "no issues" in output, output
    assert not (tmp_path / "relay.db").exists()


def test_bad_relay_settings_are_errors_with_relays_messages(tmp_path: Path) -> None:
    status, output = check(tmp_path, RELAY={"BACKEND": "sqlite:///r.db", "LEASSE": 30})
    assert status == 1 and "(relay.E001) settings.RELAY has unknown key(s) LEASSE" in output
    status, output = check(tmp_path, RELAY={"BACKEND": "mysql://db/x"})
    assert status == 1 and "relay.E001" in output and "unknown backend URL scheme" in output
    status, output = check(
        tmp_path, RELAY={"BACKEND": "sqlite:///r.db", "LEASE": 5, "HEARTBEAT": 5}
    )
    assert status == 1 and "heartbeat (5s) must be shorter than lease (5s)" in output, output


def test_lease_options_on_a_claim_backend_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}?strategy=claim"
    status, output = check(tmp_path, RELAY={"BACKEND": url, "LEASE": 30})
    assert status == 1 and "relay.E001" in output and "needs a lease backend" in output, output
    assert not (tmp_path / "c.db").exists()


def test_bad_celery_relay_settings_are_errors(tmp_path: Path) -> None:
    status, output = check(tmp_path, CELERY_RELAY_LEASE="thirty", CELERY_RELAY_BACKEND="nope")
    assert status == 1, output
    assert "CELERY_RELAY_LEASE: (relay.E002) CELERY_RELAY_LEASE must be a number" in output
    assert "CELERY_RELAY_BACKEND: (relay.E002)" in output and "backend URL" in output


def test_a_misspelled_celery_relay_setting_names_the_closest(tmp_path: Path) -> None:
    status, output = check(tmp_path, CELERY_RELAY_LEESE=30)
    assert status == 1 and "(relay.E002)" in output, output
    assert "CELERY_RELAY_LEESE (did you mean CELERY_RELAY_LEASE?)" in output


def test_an_unreachable_store_is_a_warning(tmp_path: Path) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nothing"  # nothing listens on port 1
    status, output = check(tmp_path, RELAY={"BACKEND": url})
    assert status == 0, output  # a warning does not fail the check
    assert "WARNINGS:" in output and "(relay.W001) Relay's store is unreachable" in output


def test_the_django_backend_on_a_database_relay_cannot_use(tmp_path: Path) -> None:
    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": "django"})
    env["RELAY_T_SETTINGS"] = (
        '{"RELAY": {"BACKEND": "django"}, "DATABASES": {"default": '
        '{"ENGINE": "django.db.backends.dummy", "NAME": "x"}}}'
    )
    done = manage(env, "check")
    assert done.returncode == 1 and "needs DATABASES['default'] on PostgreSQL or SQLite" in (
        done.stdout + done.stderr
    ), done.stderr
