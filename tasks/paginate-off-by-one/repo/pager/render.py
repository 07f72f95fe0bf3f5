"""Text shown under a paginated listing."""

from pager.page import Page


def render_footer(page: Page) -> str:
    """E.g. ``Page 2 of 5 (items 11-20 of 47)``; ``Page 1 of 1 (no items)`` when empty."""
    head = f"Page {page.number} of {page.page_count}"
    if page.total == 0:
        return f"{head} (no items)"
    return f"{head} (items {page.start_index}-{page.end_index} of {page.total})"


def render_nav(page: Page, window: int = 2) -> str:
    """E.g. ``< prev | 1 2 [3] 4 5 | next >``; links that lead nowhere are left out.

    At most ``window`` page numbers are shown on each side of the current page.
    """
    low = max(1, page.number - window)
    high = min(page.page_count, page.number + window)
    numbers = " ".join(
        f"[{n}]" if n == page.number else str(n) for n in range(low, high + 1)
    )
    parts = []
    if page.has_prev:
        parts.append("< prev")
    parts.append(numbers)
    if page.has_next:
        parts.append("next >")
    return " | ".join(parts)
