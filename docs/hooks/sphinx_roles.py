"""MkDocs hook: show the code's reST roles (``:class:`Run```) as plain code in the reference.

The docstrings are written for readers of the source, with Sphinx-style roles; mkdocstrings renders
Markdown, where a role would show as ``:class:Run``. The name alone reads the same.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>~?")


def on_page_content(html: str, **kwargs: Any) -> str:
    """Drop the role prefix (and Sphinx's ``~`` shortening mark) before each code span."""
    return _ROLE.sub("<code>", html)
