from pager import Paginator, render_footer, render_nav


def test_footer_first_page():
    p = Paginator(list(range(47)), per_page=10)
    assert render_footer(p.page(1)) == "Page 1 of 5 (items 1-10 of 47)"


def test_footer_middle_page():
    p = Paginator(list(range(47)), per_page=10)
    assert render_footer(p.page(3)) == "Page 3 of 5 (items 21-30 of 47)"


def test_footer_empty():
    assert render_footer(Paginator([]).page(1)) == "Page 1 of 1 (no items)"


def test_nav_middle():
    p = Paginator(list(range(47)), per_page=10)
    assert render_nav(p.page(3)) == "< prev | 1 2 [3] 4 5 | next >"


def test_nav_first_page_has_no_prev():
    p = Paginator(list(range(47)), per_page=10)
    assert render_nav(p.page(1), window=1) == "[1] 2 | next >"
