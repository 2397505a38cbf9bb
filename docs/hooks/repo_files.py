"""MkDocs hook: a link to a file of the repository outside ``docs/`` shows as its name on the site.

Each include (``--8<-- "examples/quickstart.py"``) has such a link above it, for those who read
the Markdown where it is stored (on GitHub, which shows the include line, not the file). On the
site the file itself follows the link, which has no page to lead to: it becomes the file's name in
code. A link to a page of the docs is left to MkDocs, which checks it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:\.\./)+[^)\s#]+)\)")


def on_page_markdown(markdown: str, page: Any, config: Any, **kwargs: Any) -> str:
    """Replace each link to a repository file outside the docs by its text."""
    docs = Path(config["docs_dir"]).resolve()
    here = (docs / page.file.src_path).parent

    def text(link: re.Match[str]) -> str:
        target = (here / link[2]).resolve()
        inside = docs == target or docs in target.parents
        return link[0] if inside or not target.is_file() else link[1]

    return _LINK.sub(text, markdown)
