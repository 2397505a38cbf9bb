"""Start the example: one Dramatiq worker and two Relay schedulers; Ctrl-C stops them all.

``python examples/dramatiq_app/run.py [--seconds N]`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the Relay + Dramatiq example.")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    args = parser.parse_args()
    path = [str(HERE), str(ROOT), str(ROOT / "shared"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    commands = [
        [sys.executable, "-m", "dramatiq", "tasks", "--processes", "1", "--threads", "2"],
        [sys.executable, "-m", "relay_dramatiq", "tasks"],
        [sys.executable, "-m", "relay_dramatiq", "tasks"],
    ]
    procs = [subprocess.Popen(command, cwd=HERE, env=env) for command in commands]
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        while all(p.poll() is None for p in procs):
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
