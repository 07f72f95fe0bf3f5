"""One page of a paginated sequence."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Page:
    number: int  # 1-based
    items: list[Any]
    page_count: int
    total: int
    per_page: int

    @property
    def has_prev(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.page_count

    @property
    def start_index(self) -> int:
        """1-based position of the first item on this page (0 when the page is empty)."""
        if not self.items:
            return 0
        return (self.number - 1) * self.per_page + 1

    @property
    def end_index(self) -> int:
        """1-based position of the last item on this page (0 when the page is empty)."""
        if not self.items:
            return 0
        return self.start_index + self.per_page - 1
