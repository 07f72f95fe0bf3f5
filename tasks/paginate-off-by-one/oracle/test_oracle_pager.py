"""Hidden checks: page counts at exact multiples and the last page's item range."""

import pytest

from pager import InvalidPage, Paginator, render_footer, render_nav


@pytest.mark.parametrize(
    ("total", "per_page", "pages"),
    [(0, 10, 1), (1, 10, 1), (9, 10, 1), (10, 10, 1), (11, 10, 2), (20, 10, 2), (30, 3, 10),
     (5, 1, 5)],
)
def test_page_count(total, per_page, pages):
    assert Paginator(list(range(total)), per_page=per_page).page_count == pages


def test_no_blank_page_after_an_exact_multiple():
    p = Paginator(list(range(20)), per_page=10)
    pages = list(p)
    assert [page.number for page in pages] == [1, 2]
    assert all(page.items for page in pages)
    with pytest.raises(InvalidPage):
        p.page(3)


def test_last_page_of_exact_multiple_has_no_next():
    p = Paginator(list(range(20)), per_page=10)
    assert not p.page(2).has_next
    assert render_nav(p.page(2)) == "< prev | 1 [2]"


def test_footer_last_page_is_clamped_to_total():
    p = Paginator(list(range(47)), per_page=10)
    assert render_footer(p.page(5)) == "Page 5 of 5 (items 41-47 of 47)"


def test_footer_short_single_page():
    p = Paginator(["a", "b", "c"], per_page=10)
    assert render_footer(p.page(1)) == "Page 1 of 1 (items 1-3 of 3)"
    assert p.page(1).end_index == 3


def test_footer_exact_multiple():
    p = Paginator(list(range(20)), per_page=10)
    assert render_footer(p.page(2)) == "Page 2 of 2 (items 11-20 of 20)"


def test_empty_collection_still_renders_one_page():
    p = Paginator([], per_page=5)
    assert p.page_count == 1
    assert render_footer(p.page(1)) == "Page 1 of 1 (no items)"
    assert render_nav(p.page(1)) == "[1]"
