import pytest

from pager import InvalidPage, Paginator


def test_pages_of_a_ragged_collection():
    p = Paginator(list(range(47)), per_page=10)
    assert p.page_count == 5
    assert p.page(1).items == list(range(10))
    assert p.page(5).items == [40, 41, 42, 43, 44, 45, 46]


def test_empty_collection_has_one_page():
    p = Paginator([], per_page=10)
    assert p.page_count == 1
    assert p.page(1).items == []


def test_iteration_visits_every_item_once():
    items = list("abcdefghijk")
    seen = [x for page in Paginator(items, per_page=3) for x in page.items]
    assert seen == items


@pytest.mark.parametrize("bad", [0, -1, 6, "2", True])
def test_out_of_range_page_is_rejected(bad):
    with pytest.raises(InvalidPage):
        Paginator(list(range(47)), per_page=10).page(bad)


def test_per_page_must_be_positive():
    with pytest.raises(ValueError):
        Paginator([1], per_page=0)


def test_prev_and_next():
    p = Paginator(list(range(25)), per_page=10)
    assert not p.page(1).has_prev and p.page(1).has_next
    assert p.page(2).has_prev and p.page(2).has_next
