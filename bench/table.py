"""One row of the benchmark table, and the table itself.

Every benchmark module exposes ``rows(quick: bool) -> list[Row]``: each figure with the baseline
measured in the same run (when one exists), the target and whether it is met.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    """One measured figure: ``value`` against ``baseline`` (same unit), judged by ``target``."""

    bench: str
    figure: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: str = ""
    """Human-readable target, e.g. ``<= 1.5x`` or ``<= 1 s``; empty: a figure to read, not judge."""
    check: Callable[[float, float | None], bool] | None = None
    """Given (value, ratio): whether the target is met."""

    @property
    def ratio(self) -> float | None:
        """``value / baseline``, or ``None`` without a baseline."""
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        """Whether the target is met; ``None`` when the row has no target."""
        return None if self.check is None else self.check(self.value, self.ratio)


def ratio_at_most(limit: float) -> Callable[[float, float | None], bool]:
    """Target: the ratio to the baseline is at most ``limit``."""
    return lambda value, ratio: ratio is not None and ratio <= limit


def ratio_at_least(limit: float) -> Callable[[float, float | None], bool]:
    """Target: the ratio to the baseline is at least ``limit`` (throughputs)."""
    return lambda value, ratio: ratio is not None and ratio >= limit


def at_most(limit: float) -> Callable[[float, float | None], bool]:
    """Target: the value itself is at most ``limit``."""
    return lambda value, ratio: value <= limit


def _number(value: float, unit: str) -> str:
    text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{text} {unit}".strip()


def render(rows: Sequence[Row]) -> str:
    """The table as Markdown, one line per row."""
    lines = [
        "| bench | figure | value | baseline (same run) | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        baseline = ""
        if row.baseline is not None:
            baseline = f"{_number(row.baseline, row.unit)} {row.baseline_name}".strip()
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        met = {None: "", True: "yes", False: "**no**"}[row.met]
        lines.append(
            f"| {row.bench} | {row.figure} | {_number(row.value, row.unit)} | {baseline} | "
            f"{ratio} | {row.target} | {met} |"
        )
    return "\n".join(lines)


def machine() -> str:
    """The machine the table ran on: cores, CPU model, Python, load, server versions."""
    cpu = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    parts = [
        f"{os.cpu_count()} cores ({cpu or platform.processor()})",
        f"Python {platform.python_version()}",
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]
    parts += [version for version in _server_versions() if version]
    return "; ".join(parts)


def _server_versions() -> list[str]:
    def ask(label: str, fn: Callable[[], str]) -> str:
        try:
            return f"{label} {fn()}"
        except Exception:
            return ""

    def postgres() -> str:
        import psycopg

        url = os.environ.get("RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "?"

    def redis_version() -> str:
        import redis

        url = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        with redis.Redis.from_url(url, socket_timeout=2) as client:
            return str(client.info("server")["redis_version"])

    def nats_binary() -> str:
        from tests.support.nats_server import find_binary

        binary = find_binary()
        if binary is None:
            return "?"
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip().split()[-1]

    def rabbitmq() -> str:
        import pika

        url = os.environ.get("RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
        connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            version = connection._impl.server_properties.get("version", "?")
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            connection.close()

    return [
        ask("PostgreSQL", postgres),
        ask("Redis", redis_version),
        ask("nats-server (KV benches)", nats_binary),
        ask("RabbitMQ", rabbitmq),
    ]
