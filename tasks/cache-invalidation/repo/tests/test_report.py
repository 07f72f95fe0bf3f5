from inventory import Item, Report, Store


def make_report():
    store = Store()
    store.add(Item("H1", "hammer", "tools", 1250, 4))
    store.add(Item("S1", "saw", "tools", 2000, 1))
    store.add(Item("G1", "gloves", "garden", 499, 10))
    return store, Report(store)


def test_totals():
    _, report = make_report()
    assert report.item_value("H1") == 5000
    assert report.category_total("tools") == 7000
    assert report.category_total("garden") == 4990
    assert report.category_total("kitchen") == 0
    assert report.grand_total() == 11990


def test_lines():
    _, report = make_report()
    assert report.lines() == ["garden: 49.90", "tools: 70.00"]


def test_totals_are_memoized():
    _, report = make_report()
    report.category_total("tools")
    misses = report.memo.misses
    report.category_total("tools")
    assert report.memo.misses == misses


def test_item_value_follows_price_change():
    store, report = make_report()
    assert report.item_value("H1") == 5000
    store.set_price("H1", 1000)
    assert report.item_value("H1") == 4000
