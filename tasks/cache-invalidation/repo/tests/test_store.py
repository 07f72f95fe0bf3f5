import pytest

from inventory import Item, Store, UnknownItem


def make_store():
    store = Store()
    store.add(Item("H1", "hammer", "tools", 1250, 4))
    store.add(Item("S1", "saw", "tools", 2000, 1))
    store.add(Item("G1", "gloves", "garden", 499, 10))
    return store


def test_add_and_get():
    store = make_store()
    assert store.get("S1").name == "saw"
    assert store.categories() == ["garden", "tools"]


def test_duplicate_sku_is_rejected():
    with pytest.raises(ValueError):
        make_store().add(Item("H1", "other", "tools", 1, 1))


def test_changes_are_published():
    store = make_store()
    seen = len(store.bus.history)
    store.set_price("H1", 1300)
    store.set_qty("G1", 3)
    events = store.bus.history[seen:]
    assert [topic for topic, _ in events] == ["item.changed", "item.changed"]
    assert [payload["sku"] for _, payload in events] == ["H1", "G1"]


def test_remove():
    store = make_store()
    store.remove("S1")
    with pytest.raises(UnknownItem):
        store.get("S1")
    assert [i.sku for i in store.items("tools")] == ["H1"]


def test_negative_values_are_rejected():
    store = make_store()
    with pytest.raises(ValueError):
        store.set_price("H1", -1)
    with pytest.raises(ValueError):
        store.set_qty("H1", -1)
