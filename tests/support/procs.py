"""Starting, reading and killing real worker processes (``tests.support.worker``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def spawn(command: str, args: dict[str, Any]) -> subprocess.Popen[str]:
    """Start ``python -m tests.support.worker command`` with ``args`` as JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.worker", command, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def next_event(proc: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    """Read the process's next JSON event; fail with its stderr if it dies or stays silent."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            event: dict[str, Any] = json.loads(line)
            return event
        if proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    raise AssertionError(f"worker gave no event (exit {proc.poll()}):\n{close(proc)}")


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Wait for the process and fail with its stderr if it did not exit cleanly."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr = close(proc)
    if proc.returncode != 0:
        raise AssertionError(f"worker exited {proc.returncode}:\n{stderr}")


def kill(proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` (SIGKILL by default), wait for the process to die, and close its pipes."""
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=30)
    close(proc)


def close(proc: subprocess.Popen[str]) -> str:
    """Close the process's pipes; return what it wrote to stderr."""
    stderr = ""
    if proc.stderr is not None:
        stderr = proc.stderr.read()
        proc.stderr.close()
    if proc.stdout is not None:
        proc.stdout.close()
    return stderr


def stop_all(procs: Iterable[subprocess.Popen[Any]], timeout: float = 30) -> None:
    """SIGTERM every process still running (all at once: they hand over in parallel), then wait
    for each; one that outlives ``timeout`` is killed."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
