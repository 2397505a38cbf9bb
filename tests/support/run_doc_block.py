"""Run one Python block of the docs in this fresh process: ``run_doc_block.py FILE [RAISES]``.

The block runs as written, in the current folder (a temporary one). Afterwards what it declared is
checked the way Relay checks it at start-up: a Celery app with ``RelayScheduler`` gets its beat
scheduler built (every ``beat_schedule`` entry must become a Relay job), and periodic Dramatiq
actors must be registered. ``relay.Scheduler.run()`` (which blocks until SIGTERM) is stopped after
two seconds of real ticking when the block calls it in its main thread, so a block that ends with
it still ends; a block that runs it in a thread of its own stops it itself, when it is done.
"""

from __future__ import annotations

import runpy
import sys
import threading
from typing import Any

import relay

_run = relay.Scheduler.run


def _run_two_seconds(self: relay.Scheduler[Any]) -> None:
    # Only in the main thread: a block that waits in its main thread for runs of an instance it
    # started in another (docs/schedules.md) would find it stopped after two seconds, before the
    # runs it waits for on a loaded machine.
    if threading.current_thread() is threading.main_thread():
        threading.Timer(2.0, self.stop).start()
    _run(self)


def _options(job: relay.Job) -> str:
    return (
        f"overlap={job.overlap} max_attempts={job.max_attempts} catch_up={job.catch_up} "
        f"stale_after={job.stale_after}"
    )


def _check_celery(namespace: dict[str, Any]) -> None:
    if "celery" not in sys.modules:
        return
    from celery import Celery

    from relay_celery import RelayScheduler

    for app in [v for v in namespace.values() if isinstance(v, Celery)]:
        if app.conf.beat_scheduler != "relay_celery.RelayScheduler":
            continue
        beat = RelayScheduler(app)
        try:
            jobs = beat.decider.jobs
            assert set(jobs) == set(app.conf.beat_schedule), jobs
            print(f"celery app {app.main} on {beat.settings.backend}:")
            for name, job in sorted(jobs.items()):
                print(f"  job {name}: {job.schedule.describe()}, {_options(job)}")
        finally:
            beat.close()


def _check_dramatiq() -> None:
    if "relay_dramatiq" not in sys.modules:
        return
    from relay_dramatiq import periodic_actors

    for item in periodic_actors():
        job = item.job
        print(f"  job {job.name}: {job.schedule.describe()}, {_options(job)}")


def main(path: str, raises: str | None) -> int:
    """Run the block; 0 if it ran (or raised what it declares), 1 otherwise."""
    relay.Scheduler.run = _run_two_seconds  # type: ignore[method-assign]
    try:
        namespace = runpy.run_path(path, run_name="__main__")
    except Exception as exc:
        if raises is not None and type(exc).__name__ == raises:
            print(f"raised, as declared: {type(exc).__name__}: {exc}")
            return 0
        raise
    if raises is not None:
        print(f"the block declares it raises {raises}, but it did not", file=sys.stderr)
        return 1
    _check_celery(namespace)
    _check_dramatiq()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
