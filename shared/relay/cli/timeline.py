"""``relay timeline``: a timeline of runs on one self-contained HTML page (reads the store only)."""

from __future__ import annotations

from pathlib import Path

import click

from relay.cli._options import OutputFile, Since, backend_option, count, writing
from relay.cli._stores import read_only

__all__ = ["timeline"]


@click.command()
@backend_option
@click.option("--job", "jobs", multiple=True, help="Only this job's runs (repeat for several).")
@click.option(
    "--since",
    type=Since(),
    default=None,
    help="Only runs from then on: 90s, 15m, 2h, 7d or ISO 8601.",
)
@click.option(
    "--limit",
    default=10_000,
    show_default=True,
    type=count(1, 1_000_000),
    help="Latest runs to read per --job.",
)
@click.option("--html", "out", required=True, type=OutputFile(), help="The page to write.")
def timeline(url: str, jobs: tuple[str, ...], since: str | None, limit: int, out: Path) -> None:
    """Write a timeline of runs to one self-contained HTML page (reads the store only).

    \b
    Example:
      relay timeline --backend sqlite:///relay.db --since 2h --html runs.html
    """
    from relay import timeline as tl  # drawing is only needed here

    with read_only(url) as backend:
        start = None if since is None else tl.parse_since(since, backend.now())
        drawn = tl.read(backend, jobs, start, limit)
    with writing(out):
        tl.write_html(drawn, out, title=f"Relay timeline: {backend.name}")
    click.echo(f"wrote {out}: {tl.summary(drawn)}")
