"""URL slugs."""

import re

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(title: str) -> str:
    """Lower-case ``title`` and join its words with '-'."""
    return _NON_WORD.sub("-", title.lower()).strip("-")
