"""Stored schedules: how soon instances see an edit, and what 100,000 stored schedules cost, on
every lease backend (SQLite, PostgreSQL, Redis, NATS KV).

* **Visibility**: three instance processes (``bench/schedules_instance.py``, tick 1 s) on one
  store; 100 edits of one schedule, a random 0.05 to 0.5 s apart. For each edit and instance, the
  time from the edit's return to the instance applying it (or a later version): p50 and p99.
  Target: p99 within one tick plus a round trip (1.25 s: 0.25 s for a round trip on a loaded
  machine).
* **Idle tick**: one instance holding N stored schedules (``every`` a week: nothing due); the
  median wall time of a loop step with no change and nothing due (the feed's read of the revision
  plus the decider's idle tick; sweeps left out), at 100,000 against 1,000 in the same run.
  Target <= 2x. The rows are written straight into the store's tables (the cost of a tick does
  not depend on how they were written; 100,000 adds one by one take minutes).
* **Apply**: ``relay schedules apply`` of a JSON file of N new schedules (load, every check,
  one atomic write), against writing the same N rows straight into the store's tables (the raw
  baseline, :func:`fill`) in the same run; and N against N / 10, which a linear apply keeps near
  10x (the check of names was quadratic). Target: apply <= 20x the raw write, and <= 15x N / 10.
* **Start-up and memory**: that instance's start (every schedule read, checked, turned into a
  job, then the first tick) and its resident memory per stored schedule above the same process
  with none. Target <= 1 KiB.

    python bench/bench_schedules.py [--only sqlite postgres redis nats_kv] [--count 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.stores import store  # noqa: E402
from bench.table import Row, at_most, ratio_at_most  # noqa: E402

WEEK = 7 * 86400
DEFINITION = json.dumps({"task": "echo", "every": float(WEEK), "enabled": True})
EDITS = 100
TICK = 1.0


def fill(url: str, count: int) -> None:
    """Write ``count`` stored schedules (``s0`` …) straight into the store's tables."""
    from relay import open_backend

    backend: Any = open_backend(url)
    now = int(time.time() * 1000)
    rows = [(f"s{i}", DEFINITION, 1, i + 1, now, "bench", now) for i in range(count)]
    if url.startswith("sqlite"):
        with backend._write() as (conn, _):
            conn.executemany("INSERT INTO relay_schedules VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            conn.execute("UPDATE relay_meta SET value = ? WHERE key = 'schedule_revision'",
                         (str(count),))  # fmt: skip
    elif url.startswith("postgres"):
        schema = f'"{backend.schema}"'
        with backend._connection() as conn, conn.cursor() as cur:
            with cur.copy(f"COPY {schema}.schedules FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute(f"UPDATE {schema}.meta SET value = %s WHERE key = 'schedule_revision'",
                        (str(count),))  # fmt: skip
    elif url.startswith("nats"):
        backend._call(_fill_nats(backend, rows), timeout=900)
    else:
        key = backend.prefix + "{relay:schedules}:"
        pipe = backend._redis.pipeline(transaction=False)
        for name, definition, version, revision, updated, by, created in rows:
            pipe.hset(key + "rows", name, json.dumps({
                "name": name, "definition": definition, "removed": False, "version": version,
                "revision": revision, "updated_ms": updated, "updated_by": by,
                "created_ms": created}))  # fmt: skip
            pipe.zadd(key + "feed", {name: revision})
            if len(pipe) > 10_000:
                pipe.execute()
        pipe.set(key + "rev", count)
        pipe.execute()
    backend.close()


async def _fill_nats(backend: Any, rows: list[tuple[Any, ...]]) -> None:
    """Each row's key and feed entry, then ``schedules.rev`` naming the last change (see
    ``relay/backends/_nats_schedules.py``): published without acknowledgements, then waited for."""
    from relay.backends._nats_kv_state import key_token as _encode

    last: dict[str, Any] = {}
    for name, definition, version, revision, updated, by, created in rows:
        last = {"name": name, "definition": definition, "removed": False, "version": version,
                "revision": revision, "updated_ms": updated, "updated_by": by,
                "created_ms": created}  # fmt: skip
        await backend._nc.publish(
            f"{backend._prefix}schedules.row.{_encode(name)}", json.dumps(last).encode()
        )
        await backend._nc.publish(f"{backend._prefix}schedules.log.{revision}", name.encode())
    await backend._nc.flush()
    change = {"revision": len(rows), "row": last, "history": {}}
    if not rows:
        return
    while (await backend._js.stream_info(backend._stream)).state.messages < 2 * len(rows):
        await asyncio.sleep(0.2)
    await backend._js.publish(f"{backend._prefix}schedules.rev", json.dumps(change).encode())


def instance(url: str, count: int) -> dict[str, float]:
    """In a fresh process: start-up, memory and idle step of one instance holding the store's."""
    code = f"""
import gc, json, statistics, sys, time
sys.path[:0] = {[str(ROOT), str(ROOT / "shared")]!r}
import relay
from relay.engine.stored import ScheduleFeed
def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
scheduler = relay.Scheduler({url!r}, tick=1)
scheduler.register("echo", lambda run: None)
scheduler.backend.now()  # connected
before = rss()
started = time.perf_counter()
scheduler.feed.start()
scheduler.loop.step(lambda won: True, force=True)
startup = time.perf_counter() - started
after = rss()
assert len(scheduler.feed.stored) == {count}, len(scheduler.feed.stored)
scheduler.loop.next_sweep = float("inf")
steps = []
for _ in range(300):
    t = time.perf_counter()
    scheduler.loop.step(lambda won: True)
    steps.append(time.perf_counter() - t)
print(json.dumps({{"startup": startup, "memory": (after - before) / max({count}, 1),
                  "idle": statistics.median(steps)}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def scale(name: str, count: int) -> list[Row]:
    """Idle tick at ``count`` against 1 % of it (at least 1,000), start-up and memory."""
    base_count = max(1000, count // 100)
    measured = {}
    for n in (base_count, count):
        with store(name) as url:
            fill(url, n)
            measured[n] = instance(url, n)
    big, base = measured[count], measured[base_count]
    return [
        Row(f"schedules {name}", f"idle tick, {count:,} stored schedules",
            big["idle"] * 1e6, "µs", base["idle"] * 1e6, f"{base_count:,} stored",
            "<= 2x", ratio_at_most(2.0)),
        Row(f"schedules {name}", f"start-up, {count:,} stored schedules (read, checked, first "
            "tick)", big["startup"], "s"),
        Row(f"schedules {name}", f"memory per stored schedule, {count:,}", big["memory"], "B",
            target="<= 1 KiB", check=at_most(1024)),
    ]  # fmt: skip


def apply_file(url: str, count: int, folder: Path) -> float:
    """Seconds ``relay schedules apply`` takes (file read, plan, checks, the atomic write) for a
    file of ``count`` new schedules, with a live instance allowing their task."""
    from datetime import datetime, timezone

    from relay import Control
    from relay.health import InstanceInfo
    from relay.schedule_files import apply, load, plan

    file = folder / f"schedules-{count}.json"
    items = [{"name": f"s{i}", "task": "echo", "every": WEEK} for i in range(count)]
    file.write_text(json.dumps({"schedules": items}))
    with Control(url) as control:
        now = datetime.now(timezone.utc)
        info = InstanceInfo("bench:1", "scheduler", "bench", 1, now, "0", 10.0, tasks=("echo",))
        control._lease_backend().record_instance(info, 600)
        started = time.perf_counter()
        apply(control, plan(control, load(file)), by="bench")
        took = time.perf_counter() - started
        assert len(control.schedules()) == count
    return took


def applying(name: str, count: int) -> list[Row]:
    """Apply of ``count`` entries against the raw write of as many rows, and against a tenth."""
    measured = {}
    with tempfile.TemporaryDirectory() as folder:
        for n in (count // 10, count):
            with store(name) as url:
                measured[n] = apply_file(url, n, Path(folder))
    with store(name) as url:
        started = time.perf_counter()
        fill(url, count)
        raw = time.perf_counter() - started
    return [
        Row(f"schedules {name}", f"apply, a file of {count:,} schedules", measured[count], "s",
            raw, f"raw write of {count:,} rows", "<= 20x", ratio_at_most(20.0)),
        Row(f"schedules {name}", f"apply, {count:,} against {count // 10:,} entries (linear)",
            measured[count], "s", measured[count // 10], f"{count // 10:,} entries", "<= 15x",
            ratio_at_most(15.0)),
    ]  # fmt: skip


def visibility(name: str, edits: int = EDITS) -> list[Row]:
    """p50 and p99 of edit-to-applied over ``edits`` edits and three instances."""
    with store(name) as url, tempfile.TemporaryDirectory() as folder:
        logs = [Path(folder) / f"i{n}.log" for n in range(3)]
        instance = [sys.executable, str(ROOT / "bench" / "schedules_instance.py"), url]
        procs = [subprocess.Popen([*instance, str(log), str(TICK)]) for log in logs]
        try:
            delays = edit_delays(url, logs, edits)
        finally:
            stop(procs)
    p99 = percentile(delays, 0.99)
    return [
        Row(f"schedules {name}", f"edit seen by an instance, p99 ({edits} edits x 3, tick "
            f"{TICK:g} s)", p99, "s", target=f"<= {TICK + 0.25:g} s", check=at_most(TICK + 0.25)),
        Row(f"schedules {name}", "edit seen by an instance, p50", statistics.median(delays), "s"),
    ]  # fmt: skip


def edit_delays(url: str, logs: list[Path], edits: int) -> list[float]:
    """Edit one stored schedule ``edits`` times, a random 0.05 to 0.5 s apart, while one running
    instance per log in ``logs`` appends ``[version, time]`` for each change it applies; the
    sorted delays from each edit's return to each instance applying it (or a later version)."""
    from relay import Control

    with Control(url) as control:
        _wait(lambda: len(control.allowed_tasks()) == len(logs), 60)
        control.add_schedule("edited", "echo", every=WEEK)
        _wait(lambda: all(_seen(log) for log in logs), 30)
        done: dict[int, float] = {}
        for version in range(1, edits + 1):
            time.sleep(random.uniform(0.05, 0.5))
            control.update_schedule("edited", version=version, description=str(version))
            done[version + 1] = time.time()
        _wait(lambda: all(max(_seen(log)) >= edits + 1 for log in logs), 30)
    delays = []
    for log in logs:
        seen = _seen(log)
        for version, at in done.items():
            delays.append(min(t for v, t in seen.items() if v >= version) - at)
    return sorted(delays)


def percentile(ordered: list[float], fraction: float) -> float:
    """The value at ``fraction`` (0.99: the p99) of an ascending list."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the processes, then wait for each."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def _seen(log: Path) -> dict[int, float]:
    """Version -> when the instance first applied it."""
    seen: dict[int, float] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            version, at = json.loads(line)
            seen.setdefault(version, at)
    return seen


def _wait(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.1)


STORES = ("sqlite", "postgres", "redis", "nats_kv")
"""Every lease backend: the issue's targets hold on each."""


def rows(quick: bool = False) -> list[Row]:
    """Visibility and scale on every lease backend."""
    count = 20_000 if quick else 100_000
    found = [row for name in STORES for row in visibility(name)]
    found += [row for name in STORES for row in applying(name, count)]
    return found + [row for name in STORES for row in scale(name, count)]


def main() -> None:
    """Run the chosen stores and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--only", nargs="*", default=list(STORES), choices=STORES)
    parser.add_argument("--skip", nargs="*", default=[], choices=["visibility", "apply", "scale"])
    args = parser.parse_args()
    for name in args.only:
        found = [] if "visibility" in args.skip else visibility(name)
        if "apply" not in args.skip:
            found += applying(name, args.count)
        if "scale" not in args.skip:
            found += scale(name, args.count)
        for row in found:
            ratio = f" ({row.ratio:.2f}x {row.baseline_name})" if row.ratio is not None else ""
            print(f"{row.bench:20} {row.figure:70} {row.value:10.4g} {row.unit}{ratio}")


if __name__ == "__main__":
    main()
