"""The timeline as one self-contained HTML page: inline style, inline SVG, no script, no fetch."""

from __future__ import annotations

from collections import Counter
from html import escape
from pathlib import Path

from relay.timeline.model import Timeline
from relay.timeline.svg import STYLE, render_svg

__all__ = ["render_html", "summary", "write_html"]

_PAGE_STYLE = "body{margin:16px;font:13px system-ui,sans-serif}h1{font-size:18px;margin:0 0 4px}"


def summary(timeline: Timeline) -> str:
    """One line: how many runs of how many jobs, between when, by outcome."""
    bars = [b for lane in timeline.lanes for b in lane.bars]
    counts = Counter(b.outcome for b in bars)
    marks = Counter(m.kind for b in bars for m in b.marks)
    by_state = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    by_mark = ", ".join(f"{n} {k}" for k, n in sorted(marks.items()))
    line = (
        f"{_count(len(bars), 'run')} of {_count(len(timeline.lanes), 'job')} from "
        f"{timeline.start:%Y-%m-%d %H:%M:%S} "
        f"to {timeline.end:%Y-%m-%d %H:%M:%S} UTC" + (f": {by_state}" if by_state else "")
    )
    if by_mark:
        line += f"; marks: {by_mark}"
    stored = [lane.stored for lane in timeline.lanes if lane.stored is not None]
    if stored:
        edits = sum(len(s.edits) for s in stored)
        line += f"; {_count(len(stored), 'stored schedule')}, {_count(edits, 'edit')}"
    if timeline.truncated:
        line += " (the latest runs only: raise --limit to see older ones)"
    return line


def render_html(timeline: Timeline, title: str = "Relay timeline") -> str:
    """A whole page: heading, summary, then :func:`relay.timeline.render_svg`'s fragment."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_PAGE_STYLE}{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1><p>{escape(timeline.source)} at "
        f'{timeline.now:%Y-%m-%d %H:%M:%S} UTC. <span class="summary">'
        f"{escape(summary(timeline))}</span></p>"
        "<p>Hover over a run for its owner, token, times and marks. Bars run from the slot (pale: "
        "waiting to start) to the end of the run's last attempt; a stored schedule's edits are "
        "dashed lines across its lane.</p>"
        f"{render_svg(timeline)}</body></html>\n"
    )


def write_html(timeline: Timeline, path: str | Path, title: str = "Relay timeline") -> Path:
    """Write :func:`render_html` to ``path`` (UTF-8) and return the path."""
    target = Path(path)
    target.write_text(render_html(timeline, title), encoding="utf-8")
    return target


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
