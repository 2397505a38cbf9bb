"""A timeline drawn as plain SVG on the server: one ``<g class="run">`` per run, hover text in
its ``<title>``, colours in one stylesheet (:data:`STYLE`). Nothing is computed at view time.

Each run's group carries ``data-run`` (its id) and ``data-marks`` (its marks' kinds), so a page
or a test can find it; its first rectangle (``wait``) spans the slot to the last attempt's start,
its second (``bar``) the attempt's start to its end.

A stored schedule's lane is labelled as stored, with its task; each of its edits is a
``<g class="edit">`` (``data-edit``: its kind, ``data-version``) across the lane at its moment.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from datetime import datetime, timezone
from html import escape
from statistics import median

from relay.timeline.model import MARKS, Bar, Lane, Mark, Timeline
from relay.timeline.stored import EDITS, Edit

__all__ = ["OVERDUE", "STATES", "STYLE", "render_svg"]

OVERDUE = "no run succeeded by the expectation of the oldest slot not yet succeeded"
"""What an overdue band means."""

LABEL_W, AXIS_H, ROW_H, BAR_H, PAD = 170, 30, 22, 12, 6
MIN_W, MAX_W, MIN_GAP_PX, TICK_PX = 1000, 60_000, 12, 110
STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
         21600, 43200, 86400, 172800, 604800)  # fmt: skip

STATES = {
    "succeeded": "#2f9e44",
    "failed": "#e03131",
    "running": "#f08c00",
    "pending": "#4c6ef5",
    "skipped": "#868e96",
}
"""The colour of each outcome."""
_MARK_COLOURS = {
    "takeover": "#c2255c",
    "retry": "#e8590c",
    "takeover-or-retry": "#9c36b5",
    "handover": "#1971c2",
    "expired": "#c92a2a",
    "manual": "#0c8599",
    "overlap": "#f76707",
    "missed": "#495057",
    "stale": "#8d5524",
    "paused": "#adb5bd",
}
_SKIPS = {"overlap", "missed", "stale", "paused"}
_EDIT_COLOURS = {
    "add": "#2b8a3e",
    "edit": "#5f3dc4",
    "pause": "#868e96",
    "resume": "#1098ad",
    "remove": "#212529",
}

STYLE = (
    ".relay-timeline{font:12px system-ui,sans-serif;color:#212529}"
    ".relay-timeline .tl{display:flex;border:1px solid #dee2e6}"
    ".relay-timeline .scroll{overflow-x:auto;flex:1}"
    ".relay-timeline svg text{font-size:11px;fill:#495057}"
    ".relay-timeline .lane-bg{fill:#f8f9fa}.relay-timeline .lane-bg.odd{fill:#fff}"
    ".relay-timeline .grid{stroke:#e9ecef}.relay-timeline .now{stroke:#212529;stroke-dasharray:3 3}"
    ".relay-timeline .m-expired{stroke:#c92a2a;stroke-width:2}.relay-timeline .wait{opacity:.3}"
    ".relay-timeline .live .bar{stroke:#212529;stroke-dasharray:2 2}"
    ".relay-timeline .run:hover rect{stroke:#000;stroke-width:1}"
    ".relay-timeline .legend span{display:inline-block;margin:0 12px 4px 0}"
    ".relay-timeline .legend i{display:inline-block;width:12px;height:10px;margin-right:4px}"
    + "".join(f".relay-timeline .s-{s} rect{{fill:{c}}}" for s, c in STATES.items())
    + "".join(f".relay-timeline .m-{m}{{fill:{c}}}" for m, c in _MARK_COLOURS.items())
    + ".relay-timeline .stored-tag{font-size:10px;fill:#5f3dc4}"
    + ".relay-timeline .overdue rect{fill:#e03131;opacity:.12}"
    + ".relay-timeline .edit line{stroke-width:2;stroke-dasharray:4 2}"
    + "".join(
        f".relay-timeline .e-{k} line{{stroke:{c}}}.relay-timeline .e-{k} circle{{fill:{c}}}"
        for k, c in _EDIT_COLOURS.items()
    )
)
"""The stylesheet the SVG needs, scoped to ``.relay-timeline``."""


def render_svg(timeline: Timeline) -> str:
    """The timeline as an HTML fragment: legend, lane labels, and the chart in a scrolling box."""
    scale = _scale(timeline)
    tops, height = _lane_tops(timeline.lanes)
    width = max(MIN_W, math.ceil((timeline.end - timeline.start).total_seconds() * scale) + 20)

    def x(at: datetime) -> float:
        return (at - timeline.start).total_seconds() * scale + 10

    chart = [f'<svg class="chart" width="{width}" height="{height}">']
    labels = [f'<svg class="labels" width="{LABEL_W}" height="{height}">']
    for i, (lane, top) in enumerate(zip(timeline.lanes, tops, strict=True)):
        h = lane.rows * ROW_H + 2 * PAD
        odd = " odd" if i % 2 else ""
        chart.append(f'<rect class="lane-bg{odd}" x="0" y="{top}" width="{width}" height="{h}"/>')
        labels.append(
            f'<rect class="lane-bg{odd}" x="0" y="{top}" width="{LABEL_W}" height="{h}"/>'
            + _label(lane, top + h / 2)
        )
    chart += _axis(timeline, x, width, height)
    for lane, top in zip(timeline.lanes, tops, strict=True):
        h = lane.rows * ROW_H + 2 * PAD
        chart += (_overdue(begin, end, x, top, h, timeline) for begin, end in lane.overdue)
        chart.append(f'<g class="lane" data-job="{escape(lane.job)}">')
        chart += (_bar(bar, x, top + PAD + bar.row * ROW_H) for bar in lane.bars)
        if lane.stored is not None:
            h = lane.rows * ROW_H + 2 * PAD
            chart += (_edit(edit, x(edit.at), top, h) for edit in lane.stored.edits)
        chart.append("</g>")
    if timeline.start <= timeline.now <= timeline.end:
        xn = x(timeline.now)
        chart.append(f'<line class="now" x1="{xn:.1f}" x2="{xn:.1f}" y1="0" y2="{height}"/>')
    chart.append("</svg>")
    labels.append("</svg>")
    edits = any(lane.stored is not None for lane in timeline.lanes)
    return (
        f'<div class="relay-timeline">{_legend(edits)}<div class="tl">{"".join(labels)}'
        f'<div class="scroll">{"".join(chart)}</div></div></div>'
    )


def _label(lane: Lane, middle: float) -> str:
    """The lane's name; a stored schedule's says so, with its task and state, below it."""
    name = escape(_short(lane.job))
    info = lane.stored
    if info is None:
        return f'<text x="6" y="{middle + 4:.0f}">{name}<title>{escape(lane.job)}</title></text>'
    state = "" if info.state == "enabled" else f" ({info.state})"
    tag = escape(_short(f"stored · {info.task}{state}", 30))  # a smaller font
    earlier = f"; {info.earlier} earlier edit(s) not shown" if info.earlier else ""
    title = (
        f"{lane.job}: stored schedule of task {info.task}, version {info.version}, "
        f"{info.state}{earlier}"
    )
    return (
        f'<text x="6" y="{middle - 2:.0f}">{name}<tspan class="stored-tag" x="6" dy="12">'
        f"{tag}</tspan><title>{escape(title)}</title></text>"
    )


def _edit(edit: Edit, x: float, top: float, height: float) -> str:
    """An edit: a dashed line across the lane at its moment, a dot at its top, its hover text."""
    return (
        f'<g class="edit e-{edit.kind}" data-edit="{edit.kind}" data-version="{edit.version}">'
        f"<title>{escape(edit.text)}</title>"
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + 2}" y2="{top + height - 2}"/>'
        f'<circle cx="{x:.1f}" cy="{top + 5}" r="4"/></g>'
    )


def _bar(bar: Bar, x: Callable[[datetime], float], y: float) -> str:
    """One run's group: hover text, the wait before its start, the attempt, its marks."""
    r = bar.record
    x0 = x(bar.slot)
    parts = [f"<title>{escape(_hover(bar))}</title>"]
    kinds = " ".join(m.kind for m in bar.marks)
    if bar.outcome == "skipped":
        kind = next((m.kind for m in bar.marks if m.kind in _SKIPS), "missed")
        parts.append(_diamond(x0, y + ROW_H / 2 + 1, kind))
    else:
        top = y + 8
        xb = x(bar.began) if bar.began is not None else x(bar.end)
        x1 = max(x(bar.end), xb + 2)
        if xb - x0 >= 0.5 or bar.began is None:
            parts.append(_rect("wait", x0, top, max(xb - x0, 2), BAR_H))
        if bar.began is not None:
            parts.append(_rect("bar", xb, top, x1 - xb, BAR_H))
        parts += _marks(bar.marks, x, y)
    live = " live" if bar.live else ""
    marks = f' data-marks="{kinds}"' if kinds else ""
    return (
        f'<g class="run s-{r.state.value}{live}" data-run="{escape(r.id)}"{marks}>'
        + "".join(parts)
        + "</g>"
    )


def _overdue(
    begin: datetime,
    end: datetime,
    x: Callable[[datetime], float],
    top: float,
    height: float,
    timeline: Timeline,
) -> str:
    """A band across the lane while the job was overdue, with its span as hover text."""
    left, right = x(max(begin, timeline.start)), x(min(end, timeline.end))
    text = f"overdue from {_clock(begin)} to {_clock(end)}: {OVERDUE}"
    return (
        f'<g class="overdue" data-overdue="{begin.isoformat()}"><title>{escape(text)}</title>'
        f'<rect x="{left:.1f}" y="{top:.0f}" width="{max(right - left, 1):.1f}" '
        f'height="{height}"/></g>'
    )


def _rect(cls: str, x: float, y: float, w: float, h: float) -> str:
    return f'<rect class="{cls}" x="{x:.1f}" y="{y:.0f}" width="{w:.1f}" height="{h}"/>'


def _diamond(x: float, y: float, kind: str) -> str:
    return f'<path class="mark m-{kind}" d="M{x:.1f} {y - 6:.0f}l6 6-6 6-6-6z"/>'


def _marks(marks: tuple[Mark, ...], x: Callable[[datetime], float], y: float) -> list[str]:
    """Each mark at its moment; marks of the same moment side by side around it."""
    at = [x(m.at) for m in marks]
    out = []
    for i, (mark, xm) in enumerate(zip(marks, at, strict=True)):
        near = [j for j, other in enumerate(at) if abs(other - xm) < 8]
        out.append(_mark(mark, xm + (near.index(i) - (len(near) - 1) / 2) * 9, y))
    return out


def _mark(mark: Mark, x: float, y: float) -> str:
    """A small triangle above the bar, pointing at the moment it marks."""
    if mark.kind == "expired":  # a cross where the lease ran out
        return f'<path class="mark m-expired" d="M{x - 4:.1f} {y:.0f}l8 8m0-8l-8 8"/>'
    return f'<path class="mark m-{mark.kind}" d="M{x - 4:.1f} {y:.0f}h8l-4 7z"/>'


def _hover(bar: Bar) -> str:
    r = bar.record
    state = r.state.value + (f" ({r.reason})" if r.reason else "")
    lines = [r.id, f"{state} · attempt {r.attempt}"
             + (f" ({r.failures} failed or died)" if r.failures else "")
             + f" · token {r.token}", f"owner {r.owner or '-'}"]  # fmt: skip
    times = f"slot {_clock(bar.slot)}"
    if bar.delay is not None:
        times += f" · started {bar.delay:+.3f} s after its slot"
    if r.finished_at is not None and bar.began is not None and not bar.live:
        times += f" · ran {(r.finished_at - bar.began).total_seconds():.3f} s"
    if bar.live and r.expires_at is not None:
        times += f" · lease until {_clock(r.expires_at)}"
    lines.append(times)
    if r.error:
        lines.append(f"error: {r.error[:300]}")
    lines += (m.text for m in bar.marks)
    return "\n".join(lines)


def _legend(edits: bool) -> str:
    states = "".join(f'<span><i style="background:{c}"></i>{s}</span>' for s, c in STATES.items())
    marks = "".join(
        f'<span title="{escape(MARKS[m])}"><i style="background:{c}"></i>{m}</span>'
        for m, c in _MARK_COLOURS.items()
    )
    return (
        f'<div class="legend">{states}<span><i style="background:{STATES["succeeded"]};'
        'opacity:.3"></i>wait from slot to start</span>'
        f'<span title="{escape(OVERDUE)}"><i style="background:#e03131;opacity:.12"></i>'
        "overdue</span></div>"
        f'<div class="legend">marks: {marks}</div>'
        + (f'<div class="legend">stored schedules\' edits: {_edit_legend()}</div>' if edits else "")
    )


def _edit_legend() -> str:
    return "".join(
        f'<span title="{escape(EDITS[k])}"><i style="background:{c}"></i>{k}</span>'
        for k, c in _EDIT_COLOURS.items()
    )


def _axis(timeline: Timeline, x: Callable[[datetime], float], width: int, height: int) -> list[str]:
    """Grid lines and time labels at a round step, about every :data:`TICK_PX` pixels."""
    span = (timeline.end - timeline.start).total_seconds()
    per_px = span / max(width - 20, 1)
    step = next((s for s in STEPS if s / per_px >= TICK_PX), STEPS[-1])
    first = math.ceil(timeline.start.timestamp() / step) * step
    out, day = [], ""
    t = first
    while t <= timeline.end.timestamp():
        at = datetime.fromtimestamp(t, timezone.utc)
        xt = x(at)
        label = at.strftime("%H:%M:%S") + (f".{at.microsecond // 100_000}" if step < 1 else "")
        if at.strftime("%Y-%m-%d") != day:
            day = at.strftime("%Y-%m-%d")
            label = f"{day} {label}"
        out.append(
            f'<line class="grid" x1="{xt:.1f}" x2="{xt:.1f}" y1="{AXIS_H - 6}" y2="{height}"/>'
            f'<text x="{xt + 3:.1f}" y="{AXIS_H - 10}">{label}</text>'
        )
        t += step
    return out


def _scale(timeline: Timeline) -> float:
    """Pixels per second: wide enough to tell a job's runs apart, within :data:`MAX_W`."""
    span = max((timeline.end - timeline.start).total_seconds(), 1e-3)
    gaps = []
    for lane in timeline.lanes:
        slots = sorted({b.slot for b in lane.bars})
        steps = [(b - a).total_seconds() for a, b in itertools.pairwise(slots)]
        if steps:
            gaps.append(median(steps))
    wanted = MIN_GAP_PX / min(gaps) if gaps and min(gaps) > 0 else 0.0
    return min(max(MIN_W / span, wanted), MAX_W / span)


def _lane_tops(lanes: tuple[Lane, ...]) -> tuple[list[int], int]:
    tops, y = [], AXIS_H
    for lane in lanes:
        tops.append(y)
        y += lane.rows * ROW_H + 2 * PAD
    return tops, y + 4


def _clock(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(text: str, most: int = 24) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
