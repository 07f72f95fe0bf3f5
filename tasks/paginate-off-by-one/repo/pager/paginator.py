"""Split a sequence into fixed-size pages."""

from collections.abc import Iterator, Sequence
from typing import Any

from pager.page import Page


class InvalidPage(LookupError):
    """Raised for a page number outside 1..page_count."""


class Paginator:
    """Pages over ``items``, ``per_page`` at a time.

    Pages are numbered from 1. An empty collection still has exactly one (empty) page, so a
    listing can always render "Page 1 of 1".
    """

    def __init__(self, items: Sequence[Any], per_page: int = 10) -> None:
        if per_page < 1:
            raise ValueError("per_page must be at least 1")
        self.items = list(items)
        self.per_page = per_page

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def page_count(self) -> int:
        return self.total // self.per_page + 1

    def validate(self, number: int) -> int:
        if not isinstance(number, int) or isinstance(number, bool):
            raise InvalidPage(f"page number must be an integer, not {number!r}")
        if number < 1 or number > self.page_count:
            raise InvalidPage(f"page {number} is out of range 1..{self.page_count}")
        return number

    def page(self, number: int) -> Page:
        number = self.validate(number)
        start = (number - 1) * self.per_page
        return Page(
            number=number,
            items=self.items[start : start + self.per_page],
            page_count=self.page_count,
            total=self.total,
            per_page=self.per_page,
        )

    def __iter__(self) -> Iterator[Page]:
        for number in range(1, self.page_count + 1):
            yield self.page(number)
