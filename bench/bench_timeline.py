"""The timeline of 10,000 runs: render time and file size, against reading the same records raw.

A SQLite store (its clock moved by the bench) gets ``--runs`` runs over ``--jobs`` jobs, one slot
a second per job: most succeed after a start delay, some are taken over, handed over, skipped as
overlaps or missed. Then, timed in the same process, several rounds each of:

* raw: ``backend.runs(None, limit)`` alone, the baseline;
* JSON: the same read dumped as JSON (what ``relay runs --json`` does), for comparison;
* timeline: the same read, laid out and rendered into the HTML page (what ``relay timeline`` does).

Medians are printed, with the ratio to the raw read, the page's size, and with ``--browser`` the
time headless Chromium (``/usr/bin/chromium``, driven by Selenium) takes to load and lay it out.

    python bench/bench_timeline.py [--runs 10000] [--jobs 5] [--repeat 5] [--browser]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relay import AcquireRequest
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.timeline import read, render_html

T0 = 1_800_000_000.0


def fill(path: Path, runs: int, jobs: int) -> SQLiteLeaseBackend:
    """A store holding ``runs`` runs of ``jobs`` jobs, with a mix of every kind of mark."""
    now = [T0]
    backend = SQLiteLeaseBackend(path, clock=lambda: now[0], durability="fast")
    for n in range(runs):
        job, second = f"job-{n % jobs}", n // jobs
        slot = datetime.fromtimestamp(T0 + second, timezone.utc)
        now[0] = T0 + second + 0.05 * (n % 7)
        if n % 97 == 5:
            backend.skip(job, slot, "missed")
            continue
        request = AcquireRequest(job, slot, "host-a:1", 5, max_attempts=3, overlap_skip=True)
        won = backend.acquire(request).run
        if won is None:
            continue
        backend.start(won.id, won.token, won.owner, 5)
        if n % 50 == 7:  # a hand-over, then another instance runs it
            backend.release(won.id, won.token)
            won = backend.acquire(AcquireRequest(job, slot, "host-b:2", 5, max_attempts=3)).run
            assert won is not None
            backend.start(won.id, won.token, won.owner, 5)
        elif n % 50 == 9:  # the runner dies: taken over once its lease expired
            now[0] += 6
            won = backend.acquire(AcquireRequest(job, slot, "host-b:2", 5, max_attempts=3)).run
            assert won is not None
            backend.start(won.id, won.token, won.owner, 5)
        now[0] += 0.3 + 0.1 * (n % 5)
        backend.finish(won.id, won.token, succeeded=n % 31 != 3, error="boom")
    return backend


def as_json(backend: SQLiteLeaseBackend, limit: int) -> int:
    records = backend.runs(None, limit)
    return len(json.dumps([asdict(r) for r in records], default=str))


def page(backend: SQLiteLeaseBackend, limit: int) -> str:
    return render_html(read(backend, limit=limit))


def median_ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def browser_ms(path: Path, repeat: int) -> float:
    """Median milliseconds for headless Chromium to load the page and lay out its SVG."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"):  # fmt: skip
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='relay-bench-chromium-')}")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:

        def load() -> None:
            driver.get(path.as_uri())
            driver.execute_script("return document.querySelector('svg.chart').getBBox().width")

        return median_ms(load, repeat)
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--browser", action="store_true", help="also time Chromium loading it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relay-bench-timeline-") as folder:
        backend = fill(Path(folder) / "relay.db", args.runs, args.jobs)
        count = len(backend.runs(None, args.runs + 1))
        raw_ms = median_ms(lambda: backend.runs(None, args.runs), args.repeat)
        json_ms = median_ms(lambda: as_json(backend, args.runs), args.repeat)
        page_ms = median_ms(lambda: page(backend, args.runs), args.repeat)
        html = page(backend, args.runs)
        out = Path(folder) / "timeline.html"
        out.write_text(html, encoding="utf-8")
        size = out.stat().st_size
        print(f"runs in the store: {count} over {args.jobs} jobs (medians of {args.repeat})")
        print(f"raw read (baseline):          {raw_ms:8.1f} ms")
        print(f"read + JSON (relay runs):     {json_ms:8.1f} ms   {json_ms / raw_ms:5.2f}x raw")
        print(f"timeline read + HTML page:    {page_ms:8.1f} ms   {page_ms / raw_ms:5.2f}x raw")
        print(f"page size: {size / 1e6:.2f} MB ({size / max(count, 1):.0f} bytes a run)")
        if args.browser:
            load_ms = browser_ms(out, max(1, args.repeat // 2))
            print(f"Chromium load and layout:     {load_ms:8.1f} ms   {load_ms / raw_ms:5.2f}x raw")
        backend.close()


if __name__ == "__main__":
    main()
