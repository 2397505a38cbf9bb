"""``serve()`` takes SIGTERM and SIGINT in a plain asyncio app, and hands its runs over.

Real processes (``tests.support.serve_instance``): ``asyncio.run(main())`` where ``main`` only
awaits ``scheduler.serve()``. Before, SIGTERM killed the process mid-run and the run was taken
over a lease later, so its body ran twice; now the run in progress finishes within
``stop_timeout`` and is recorded once, or is handed over and taken at once by another instance.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import relay
from relay.errors import ConfigurationError
from relay.runs import RunState
from tests.support.procs import ROOT
from tests.support.slots import one_slot_behind

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}


def until(what: str, found: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.05)
    return value


def lines(log: Path) -> list[list[Any]]:
    text = log.read_text() if log.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def serving(tmp: Path, name: str, job: dict[str, Any], **options: Any) -> subprocess.Popen[str]:
    args = {
        "url": f"sqlite:///{tmp / 'relay.db'}", "log": str(tmp / "runs.log"), "name": name,
        "job": job, "lease": 30, **options,
    }  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.serve_instance", json.dumps(args)],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
    return proc


def records(tmp: Path) -> list[relay.RunRecord]:
    backend = relay.open_backend(f"sqlite:///{tmp / 'relay.db'}", read_only=True)
    try:
        assert backend.capability == "lease"
        return backend.runs("job")
    finally:
        backend.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_lets_the_run_finish_and_records_it_once(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc = serving(tmp_path, "a", one_slot_behind(), work=1.0, stop_timeout=10)
    try:
        until("the run to start", lambda: lines(tmp_path / "runs.log"))
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert [event for _, _, event in lines(tmp_path / "runs.log")] == ["start", "done"]
    (record,) = records(tmp_path)  # succeeded: no instance will ever run it again
    assert record.state is RunState.SUCCEEDED and record.attempt == 1


def test_a_run_still_going_at_stop_timeout_is_handed_over_and_taken_at_once(
    tmp_path: Path,
) -> None:
    job = one_slot_behind()
    first = serving(tmp_path, "a", job, work=60, stop_timeout=0.5)
    try:
        until("the run to start", lambda: lines(tmp_path / "runs.log"))
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, stderr
    assert [event for _, _, event in lines(tmp_path / "runs.log")] == ["start", "cancelled"]
    (record,) = records(tmp_path)
    assert record.state is RunState.PENDING and record.reason == "released"
    second = serving(tmp_path, "b", job, work=0.1, stop_timeout=5)
    try:
        # Long before the 30 s lease could run out: only a hand-over lets it in.
        until("the run to end elsewhere", lambda: len(lines(tmp_path / "runs.log")) >= 4, 20)
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=60)
    assert [(attempt, event) for _, attempt, event in lines(tmp_path / "runs.log")] == [
        (1, "start"), (1, "cancelled"), (2, "start"), (2, "done"),
    ]  # fmt: skip


def test_serve_puts_the_former_handlers_back_and_leaves_owned_signals_alone(
    tmp_path: Path,
) -> None:
    """Taken where nothing owns SIGTERM, put back on return; left alone where the app owns it."""
    seen: list[object] = []

    async def main(handle: bool | None) -> None:
        scheduler = relay.Scheduler(f"sqlite:///{tmp_path / 'r.db'}")
        serving = asyncio.ensure_future(scheduler.serve(handle_signals=handle))
        await asyncio.sleep(0.2)
        seen.append(signal.getsignal(signal.SIGTERM))
        scheduler.stop()
        await serving

    def owned(signum: int, frame: object) -> None: ...

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        asyncio.run(main(None))
        assert callable(seen[-1]) and seen[-1] is not owned  # serve() took it
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # and put it back
        signal.signal(signal.SIGTERM, owned)
        asyncio.run(main(None))
        assert seen[-1] is owned  # the app's own handler stays
        asyncio.run(main(True))
        assert seen[-1] is not owned and signal.getsignal(signal.SIGTERM) is owned
    finally:
        signal.signal(signal.SIGTERM, before)


def test_handle_signals_true_off_the_main_thread_is_refused(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def serve_in_a_thread() -> None:
        scheduler = relay.Scheduler(f"sqlite:///{tmp_path / 'r.db'}")
        try:
            asyncio.run(scheduler.serve(handle_signals=True))
        except ConfigurationError as exc:
            errors.append(exc)
        finally:
            scheduler.backend.close()

    thread = threading.Thread(target=serve_in_a_thread)
    thread.start()
    thread.join(30)
    assert len(errors) == 1 and "main thread" in str(errors[0])
