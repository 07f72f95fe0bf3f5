"""inventory: a stock list with a cached valuation report."""

from inventory.cache import Memo
from inventory.events import EventBus
from inventory.report import Report
from inventory.store import Item, Store, UnknownItem

__all__ = ["EventBus", "Item", "Memo", "Report", "Store", "UnknownItem"]
