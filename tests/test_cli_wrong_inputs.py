"""No traceback from any ``relay`` command, for any input: a property-based test.

Every command and option is enumerated from the ``relay`` click group itself, so a new command or
option is driven too. Hypothesis gives each wrong values (text, NaN and infinite numbers, huge
and negative ones, malformed times and JSON, NUL bytes, 10 KB strings, unknown options), files
that are malformed YAML, binary or folders, and output paths in missing folders. Every exit must
be 0, or a one-line error (``Error: …``) with exit status 2 for usage and 1 for a refusal, never
a traceback; the two verdicts that exit 1 without an error (``relay health``'s "unhealthy",
``relay doctor --strict``) are told apart.

SQLite gets the most examples, each on a fresh copy of a seeded store; PostgreSQL and Redis a
smaller set on a fresh store per command. ``runs --follow`` cannot loop here: its sleep is
replaced by one that checks the interval is never under the floor, then stops the loop as Ctrl-C
would. ``relay demo`` records what it would start instead of starting processes. A few
subprocess checks run the real entry point. Each test prints how many inputs it tried.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay import Control, open_backend
from relay.cli import main
from relay.cli import runs as runs_module
from relay.cli.runs import MIN_INTERVAL
from relay.engine import Decider
from relay.health import InstanceInfo
from relay.jobs import make_job
from tests.support.backends import postgres_lease, redis_lease

UTC = timezone.utc


def leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the group, as the words that name it (``("schedules", "add")``)."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaves(command, (*path, name))
        else:
            yield (*path, name)


def command_of(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for word in path:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    return command


COMMANDS = list(leaves(main))
STORE_COMMANDS = [p for p in COMMANDS if p != ("demo",)]

WRONG = [
    "", " ", "abc", "nan", "NaN", "-nan", "nanm", "inf", "-inf", "Infinity", "infd", "1e400",
    "-1", "-0.5", "-5m", "0", "0.0", "0.05", "1e-400", "1e300", "99999999999999999999999",
    "-99999999999999999999999", "12x", "s", "1.5", "0x10", "2026-13-01T00:00:00Z",
    "2026-01-01T00:00:00", "9999-12-31T23:59:59+14:00", "0001-01-01T00:00:00Z", "\x00",
    "a\x00b", "💥", "{", "[1,", "null", "[]", "{}", '{"a": 1}', '["x"]', "x" * 10_000, "-",
    "--json", "..", "/", "relay:", "*", "61 * * * *", "Europe/Nowhere", "'; DROP TABLE x; --",
    "%s", "{name}", "\n", "a\nb",
]  # fmt: skip
"""Wrong values every option and argument gets, beside random text and numbers."""

GOOD = [
    "nightly", "often", "report", "30", "90s", "1h", "7d", "5", "1", "2026-11-01T00:00:00Z",
    "0 3 * * *", "Europe/Paris", "[1]", '{"a": 1}', "echo", "skip", "allow", "catch_up",
    "failed", "scheduler",
]  # fmt: skip
"""Values some option takes, so that later options and the command's body are reached too."""

values = st.one_of(
    st.sampled_from(WRONG),
    st.sampled_from(GOOD),
    st.text(max_size=30),
    st.floats().map(repr),
    st.integers().map(str),
)


@contextmanager
def no_real_loops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """``runs --follow`` reads once, then its sleep checks the interval and stops it; ``demo``
    records its arguments instead of starting processes, and ``console`` serves nothing. Yields
    the intervals slept."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        assert math.isfinite(seconds) and seconds >= MIN_INTERVAL, f"--follow slept {seconds}"
        raise KeyboardInterrupt  # as Ctrl-C: --follow returns

    def demo(*, instances: int, duration: float, kill: bool, console: Any) -> bool:
        assert 2 <= instances <= 16 and math.isfinite(duration) and duration >= 1, (
            instances,
            duration,
        )
        return True

    def serve(app: Any, *, host: str, port: int, log_level: str) -> None:
        assert 0 <= port <= 65535, port

    monkeypatch.setattr(runs_module, "sleep", sleep)
    monkeypatch.setattr("relay.demo.run_demo", demo)
    monkeypatch.setattr("uvicorn.run", serve)  # relay console checks its input, serves nothing
    yield slept


class Files:
    """What a FILE argument is given: files to read (malformed, binary, a folder...) and paths
    to write (in a missing folder, a folder, empty...)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        texts = {
            "bad.yaml": "schedules: [ {name: a\n  task: : :",
            "tabs.yaml": "schedules:\n\t- name: a",
            "scalar.yaml": "just text",
            "deep.json": "[" * 100_000,
            "shape.json": '{"schedules": [1, 2]}',
            "ok.yaml": "schedules:\n  - name: report\n    task: echo\n    every: 60\n",
            "wrong.yaml": "schedules:\n  - name: r2\n    task: echo\n    every: nan\n",
            "empty.json": "",
        }
        for name, text in texts.items():
            (root / name).write_text(text)
        (root / "binary.yaml").write_bytes(bytes(range(256)) * 16)
        (root / "binary.json").write_bytes(b"\xff\xfe\x00" * 100)
        (root / "folder.yaml").mkdir()
        self.read = [str(root / n) for n in [*texts, "binary.yaml", "binary.json", "folder.yaml"]]
        self.read += [str(root / "missing.yaml"), "", "\x00"]
        self.write = [
            str(root / "no" / "such" / "out.yaml"), str(root / "folder.yaml"), "", "\x00",
            "/proc/x.html", str(root / "binary.yaml"),
        ]  # fmt: skip
        self.good_read = [str(root / "ok.yaml"), str(root / "wrong.yaml")]
        self.good_write = [str(root / "out.yaml"), str(root / "out.json"), str(root / "t.html")]
        self.urls = [
            "gopher://x/y", "sqlite://", "sqlite:///", "sqlite://host/x.db", "redis://[::1",
            "::", "", "relay.db", f"sqlite:///{root}/no/such/dir/x.db",
            f"sqlite:///{root}/binary.json", f"sqlite:///{root}/folder.yaml",
            f"sqlite:///{root}/x.db?busy_timeout=nan", f"sqlite:///{root}/x.db?durability=maybe",
            f"sqlite:///{root}/x.db?bogus=1", f"sqlite:///{root}/x.db?strategy=claim",
            "redis://127.0.0.1:6379/0?prefix=", "redis://127.0.0.1:6379/abc",
            "postgresql://127.0.0.1/test?schema=a%3Bb", "amqp://", "nats://?bucket=a.b",
        ]  # fmt: skip
        self.reading = False


GOOD_BY_NAME: dict[str, list[str]] = {
    "job": ["nightly", "often"], "jobs": ["nightly"], "name": ["report", "new"], "task": ["echo"],
    "cron": ["0 3 * * *"], "every": ["60", "15m"], "at": ["2030-01-01T00:00:00Z"],
    "tz": ["Europe/Paris"], "args": ["[1]"], "kwargs": ['{"a": 1}'], "options": ["{}"],
    "start": ["2026-11-01T00:00:00Z"], "end": ["2026-11-02T00:00:00Z"], "max_runs": ["3"],
    "overlap": ["skip"], "catch_up": ["1h"], "max_attempts": ["2"], "stale_after": ["1h"],
    "jitter": ["5"], "description": ["a report"], "version": ["1"], "by": ["ops"],
    "reason": ["upgrade"], "window": ["1h"], "older_than": ["30d"], "count": ["3"],
    "limit": ["5"], "since": ["2h", "2026-11-01T00:00:00Z"], "interval": ["0.5"],
    "max_age": ["60"], "owner": ["host:1"], "host": ["host"], "instances": ["2"],
    "duration": ["5"],
}  # fmt: skip
"""Values each parameter takes, so that an example with one wrong value reaches the body."""


def good(param: click.Parameter, files: Files) -> st.SearchStrategy[str]:
    if isinstance(param.type, click.Choice):
        return st.sampled_from([str(c) for c in param.type.choices])
    if param.name == "file":
        return st.sampled_from(files.good_read if files.reading else files.good_write)
    if param.name == "out":
        return st.sampled_from(files.good_write)
    return st.sampled_from(GOOD_BY_NAME.get(param.name or "", ["x"]))


def wrong(param: click.Parameter, files: Files) -> st.SearchStrategy[str]:
    if param.name == "url":
        return st.sampled_from(files.urls)
    if param.name == "file":
        return st.sampled_from(files.read if files.reading else files.write) | values
    if param.name == "out":
        return st.sampled_from(files.write) | values
    return values


@st.composite
def argv(draw: st.DrawFn, path: tuple[str, ...], url: str, files: Files) -> list[str]:
    """The words of one invocation of the command at ``path``: one or two parameters given a
    wrong value (or none), the others a good one or omitted; sometimes an unknown option or a
    stray argument."""
    command = command_of(path)
    files.reading = path[-1] == "apply"
    params = [p for p in command.params if not getattr(p, "is_flag", False)]
    bad = set(draw(st.lists(st.sampled_from(params), max_size=2))) if params else set()
    words = list(path)
    for param in command.params:
        if isinstance(param, click.Option) and param.is_flag:
            if draw(st.booleans()):
                words.append(param.opts[0])
            continue
        given = param in bad or param.required or param.name == "url" or draw(st.booleans())
        if not given:
            continue
        value = draw(wrong(param, files) if param in bad else good(param, files))
        if param.name == "url" and param not in bad:
            value = url
        words += [value] if isinstance(param, click.Argument) else [param.opts[0], value]
    return words + draw(st.sampled_from([[]] * 6 + [["--bogus"], ["stray"], ["--backend"]]))


def check(result: Result, args: list[str]) -> None:
    """A clean exit: 0, a verdict, or one ``Error:`` line (2: usage, 1: refusal)."""
    shown = f"relay {args!r} ->\n{result.output}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"{shown}\n{trace}")
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback" not in result.output, shown
    assert "nans" not in result.output and "max age nan" not in result.output, shown
    if result.exit_code == 0:
        return
    if args[0] == "doctor" and "--json" in args:
        printed = json.loads(result.output)  # JSON on every path
        assert set(printed) == {"error", "exit_code"} or "--strict" in args, shown
        return
    verdict = (args[0] == "health" and "unhealthy:" in result.output) or (
        args[0] == "doctor" and "--strict" in args and "Error:" not in result.output
    )
    if result.exit_code == 1 and verdict:
        return
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [n for n, line in enumerate(lines) if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0] == len(lines) - 1, f"not one error line: {shown}"
    assert len(lines[-1]) > len("Error: ") + 10, shown
    usage = any(line.startswith("Usage: ") for line in lines)
    assert not usage or result.exit_code == 2, f"a usage error exits 2: {shown}"


def seed(url: str) -> None:
    """Two jobs, a stored schedule, an instance's heartbeat and a few runs."""
    backend = open_backend(url)
    decider = Decider(backend, owner="host:1", lease=30)
    decider.add(make_job(backend, name="nightly", cron="0 3 * * *", tz="Europe/Paris"))
    decider.add(make_job(backend, name="often", every=60))
    decider.sweep()
    info = InstanceInfo("host:1", "scheduler", "host", 1, datetime.now(UTC), "0", 10.0)
    backend.record_instance(info, 600)  # type: ignore[union-attr]
    backend.close()
    with Control(url) as control:
        control.add_schedule("report", "echo", every=3600, force=True)
        control.trigger("often")


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, env={"COLUMNS": "120", "RELAY_BACKEND": ""})


TRIED: dict[str, list[int]] = {}
"""Per store and command: how many inputs exited 0, 1 and 2."""


def tried(store: str, path: tuple[str, ...], result: Result) -> None:
    counts = TRIED.setdefault(f"{store} {' '.join(path)}", [0, 0, 0])
    counts[result.exit_code] += 1


def report(store: str, path: tuple[str, ...]) -> None:
    ok, refused, usage = TRIED.get(f"{store} {' '.join(path)}", [0, 0, 0])
    print(
        f"{store} {' '.join(path)}: {ok + refused + usage} inputs, none gave a traceback "
        f"(exit 0: {ok}, refused 1: {refused}, usage 2: {usage})"
    )


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths (an export to a random name, a ``sqlite:///relay.db``) land in a
    temporary folder, never in the project."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    """A seeded SQLite store, copied for each example."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "relay.db"
        seed(f"sqlite:///{path}")
        yield path


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_no_command_gives_a_traceback_on_sqlite(
    path: tuple[str, ...], template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tempfile.TemporaryDirectory() as folder, no_real_loops(monkeypatch):
        files = Files(Path(folder))

        @settings(
            max_examples=20, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
        )  # fmt: skip
        @given(data=st.data())
        def example(data: st.DataObject) -> None:
            with tempfile.TemporaryDirectory(dir=folder) as fresh:
                db = Path(fresh) / "relay.db"
                shutil.copy(template, db)
                args = data.draw(argv(path, f"sqlite:///{db}", files))
                result = invoke(args)
                check(result, args)
                tried("sqlite", path, result)

        example()
    report("sqlite", path)


@pytest.mark.parametrize(
    "store",
    [
        pytest.param(postgres_lease, marks=pytest.mark.postgres, id="postgres"),
        pytest.param(redis_lease, marks=pytest.mark.redis, id="redis"),
    ],
)
@pytest.mark.parametrize("path", STORE_COMMANDS, ids=" ".join)
def test_no_command_gives_a_traceback_on_a_server(
    path: tuple[str, ...], store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = store.__name__.split("_")[0]
    with store(tmp_path) as url, no_real_loops(monkeypatch):
        seed(url)
        files = Files(tmp_path)

        @settings(
            max_examples=6, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
        )  # fmt: skip
        @given(data=st.data())
        def example(data: st.DataObject) -> None:
            args = data.draw(argv(path, url, files))
            result = invoke(args)
            check(result, args)
            tried(name, path, result)

        example()
    report(name, path)


# -- the inputs the issue lists, each with its exit status and the fix it names ---------------


@pytest.fixture
def seeded(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    seed(url)
    return url


def test_the_wrong_inputs_of_the_issue_exit_with_a_line_naming_the_fix(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = Files(tmp_path)
    b = ["--backend", seeded]
    add = ["schedules", "add", *b, "r9", "echo", "--force"]
    cases: list[tuple[list[str], int, str]] = [
        (["schedules", "apply", *b, str(tmp_path / "bad.yaml")], 1, "is not valid YAML"),
        (["schedules", "apply", *b, str(tmp_path / "binary.yaml")], 1, "is not text"),
        (["schedules", "apply", *b, str(tmp_path / "deep.json")], 1, "nests too deep"),
        (["schedules", "apply", *b, "/dev/zero"], 2, "is not a regular file"),
        ([*add, "--every", "60", "--max-runs", "abc"], 2, "'abc' is not a whole number"),
        ([*add, "--every", "nan"], 2, "'nan' is not a duration"),
        ([*add, "--every", "inf"], 2, "more than a century"),
        (["prune", *b, "--older-than", "-1d"], 2, "is negative; use 0 or more"),
        (["runs", *b, "--follow", "--interval", "-1"], 2, "use 0.1 or more"),
        (["runs", *b, "--follow", "--interval", "0"], 2, "would spin a core"),
        (["health", *b, "--max-age", "nan"], 2, "'nan' is not a duration"),
        (["schedules", "export", *b, files.write[0]], 2, "does not exist: create it first"),
        (["timeline", *b, "--html", files.write[0]], 2, "does not exist: create it first"),
        (["timeline", *b, "--html", str(tmp_path)], 2, "is a folder"),
        (["schedules", "export", *b, "x" * 5000], 2, "File name too long"),
        (
            ["migrate", "--backend", f"sqlite:///{tmp_path}/c.db?strategy=claim", "--contract"],
            1,
            "is a claim store",
        ),
        (["runs", *b, "--since", "99999999999d"], 2, "before the year 1"),
        (["runs", *b, "--limit", "99999999999999999999999"], 2, "--limit"),
        (["jobs", "--backend", "gopher://localhost/x"], 1, "gopher"),
        (["demo", "--duration", "nan"], 2, "--duration"),
        (["--bogus"], 2, "No such option"),
        (["nope"], 2, "No such command"),
        (["schedules", "nope"], 2, "No such command"),
    ]
    with no_real_loops(monkeypatch):
        for args, status, fix in cases:
            result = invoke(args)
            check(result, args)
            assert result.exit_code == status, (args, result.output)
            assert fix in result.output, (args, result.output)


def test_follow_reads_at_the_interval_it_was_given(
    seeded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with no_real_loops(monkeypatch) as slept:
        result = invoke(["runs", "--backend", seeded, "--follow", "--interval", "0.1"])
        assert result.exit_code == 0, result.output
        assert "often" in result.output
        assert slept == [0.1]


def test_health_never_says_max_age_nans(seeded: str) -> None:
    shown = invoke(["health", "--backend", seeded, "--max-age", "1e-9"])
    assert shown.exit_code == 2 and "nans" not in shown.output
    alive = invoke(["health", "--backend", seeded, "--max-age", "600"])
    assert alive.exit_code == 0 and "(max age 600s)" in alive.output


def test_the_real_entry_point_prints_no_traceback(seeded: str, tmp_path: Path) -> None:
    Files(tmp_path)
    b = ["--backend", seeded]
    lines = [
        ["schedules", "apply", *b, str(tmp_path / "bad.yaml")],
        ["schedules", "apply", *b, str(tmp_path / "binary.json")],
        ["schedules", "add", *b, "x", "echo", "--max-runs", "abc"],
        ["prune", *b, "--older-than", "nan"],
        ["runs", *b, "--follow", "--interval", "0"],
        ["timeline", *b, "--html", str(tmp_path / "no" / "t.html")],
        ["doctor", "--json", "--backend", "gopher://x"],
    ]
    for line in lines:
        done = subprocess.run(
            [sys.executable, "-m", "relay.cli", *line],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode in (1, 2), (line, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout, (line, done.stderr)
        assert done.stdout.strip() or done.stderr.strip().splitlines()[-1].startswith("Error: ")
