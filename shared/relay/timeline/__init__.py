"""A timeline of runs: a lane per job, a bar per run, coloured by outcome, with marks.

Read from a lease store's run records (:meth:`relay.LeaseBackend.runs`), drawn as plain SVG on the
server into one self-contained HTML page (``relay timeline --html out.html``) or into a fragment
another page embeds (the Django admin's). See :mod:`relay.timeline.model` for what records can
and cannot tell. Stored schedules are lanes too, their edits marks (:mod:`relay.timeline.stored`).
"""

from relay.timeline.model import MARKS, Bar, Lane, Mark, Timeline, build_timeline, parse_since, read
from relay.timeline.page import render_html, summary, write_html
from relay.timeline.stored import EDITS, Edit, StoredLane
from relay.timeline.svg import STATES, STYLE, render_svg

__all__ = [
    "EDITS",
    "MARKS",
    "STATES",
    "STYLE",
    "Bar",
    "Edit",
    "Lane",
    "Mark",
    "StoredLane",
    "Timeline",
    "build_timeline",
    "parse_since",
    "read",
    "render_html",
    "render_svg",
    "summary",
    "write_html",
]
