"""Valuation report over a store, memoized; the bus tells it what went stale."""

from inventory.cache import Memo
from inventory.store import Store


class Report:
    def __init__(self, store: Store, memo: "Memo | None" = None) -> None:
        self.store = store
        self.memo = memo or Memo()
        store.bus.subscribe("item.changed", self._on_item_changed)

    def item_value(self, sku: str) -> int:
        """Stock value of one item, in cents."""
        return self.memo.get_or_compute(("item", sku), lambda: self._value_of(sku))

    def category_total(self, category: str) -> int:
        """Stock value of every item in ``category``, in cents (0 for an unknown category)."""
        return self.memo.get_or_compute(
            ("category", category),
            lambda: sum(self.item_value(i.sku) for i in self.store.items(category)),
        )

    def grand_total(self) -> int:
        return sum(self.category_total(c) for c in self.store.categories())

    def lines(self) -> list[str]:
        """One line per category, e.g. ``tools: 125.50``."""
        return [
            f"{c}: {self.category_total(c) / 100:.2f}" for c in self.store.categories()
        ]

    def _value_of(self, sku: str) -> int:
        item = self.store.get(sku)
        return item.price_cents * item.qty

    def _on_item_changed(self, sku: str) -> None:
        self.memo.invalidate(("item", sku))
