"""The stock list. Every change is announced on the bus as ``item.changed``."""

from dataclasses import dataclass, replace

from inventory.events import EventBus


class UnknownItem(KeyError):
    """No item with that SKU."""


@dataclass(frozen=True)
class Item:
    sku: str
    name: str
    category: str
    price_cents: int
    qty: int


class Store:
    def __init__(self, bus: "EventBus | None" = None) -> None:
        self.bus = bus or EventBus()
        self._items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        if item.sku in self._items:
            raise ValueError(f"duplicate SKU {item.sku}")
        if item.price_cents < 0 or item.qty < 0:
            raise ValueError("price and quantity must not be negative")
        self._items[item.sku] = item

    def get(self, sku: str) -> Item:
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownItem(sku) from None

    def items(self, category: "str | None" = None) -> list[Item]:
        return [i for i in self._items.values() if category is None or i.category == category]

    def categories(self) -> list[str]:
        return sorted({i.category for i in self._items.values()})

    def _update(self, sku: str, **changes: object) -> Item:
        item = replace(self.get(sku), **changes)
        self._items[sku] = item
        self.bus.publish("item.changed", sku=sku)
        return item

    def set_price(self, sku: str, price_cents: int) -> Item:
        if price_cents < 0:
            raise ValueError("price must not be negative")
        return self._update(sku, price_cents=price_cents)

    def set_qty(self, sku: str, qty: int) -> Item:
        if qty < 0:
            raise ValueError("quantity must not be negative")
        return self._update(sku, qty=qty)

    def move(self, sku: str, category: str) -> Item:
        return self._update(sku, category=category)

    def remove(self, sku: str) -> Item:
        item = self.get(sku)
        del self._items[sku]
        return item
