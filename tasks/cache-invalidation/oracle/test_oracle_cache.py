"""Hidden checks: every kind of store change refreshes exactly the cached totals it affects."""

import pytest

from inventory import Item, Report, Store, UnknownItem


@pytest.fixture()
def setup():
    store = Store()
    store.add(Item("H1", "hammer", "tools", 1250, 4))
    store.add(Item("S1", "saw", "tools", 2000, 1))
    store.add(Item("G1", "gloves", "garden", 499, 10))
    report = Report(store)
    assert report.category_total("tools") == 7000
    assert report.category_total("garden") == 4990
    assert report.grand_total() == 11990
    return store, report


def test_price_change_refreshes_category_and_grand_total(setup):
    store, report = setup
    store.set_price("H1", 1000)
    assert report.category_total("tools") == 6000
    assert report.grand_total() == 10990
    assert report.lines() == ["garden: 49.90", "tools: 60.00"]


def test_qty_change_refreshes_category(setup):
    store, report = setup
    store.set_qty("G1", 2)
    assert report.category_total("garden") == 998


def test_move_refreshes_old_and_new_category(setup):
    store, report = setup
    store.move("S1", "garden")
    assert report.category_total("tools") == 5000
    assert report.category_total("garden") == 6990
    assert report.grand_total() == 11990


def test_move_to_a_new_category(setup):
    store, report = setup
    store.move("G1", "outdoor")
    assert report.category_total("garden") == 0
    assert report.category_total("outdoor") == 4990
    assert report.lines() == ["outdoor: 49.90", "tools: 70.00"]


def test_remove_refreshes_category(setup):
    store, report = setup
    report.item_value("S1")
    store.remove("S1")
    assert report.category_total("tools") == 5000
    assert report.grand_total() == 9990
    with pytest.raises(UnknownItem):
        report.item_value("S1")


def test_add_refreshes_category(setup):
    store, report = setup
    store.add(Item("R1", "rake", "garden", 1500, 2))
    assert report.category_total("garden") == 7990


def test_unrelated_totals_stay_cached(setup):
    store, report = setup
    store.set_price("H1", 1000)
    assert ("category", "garden") in report.memo
    misses = report.memo.misses
    assert report.category_total("garden") == 4990
    assert report.memo.misses == misses
