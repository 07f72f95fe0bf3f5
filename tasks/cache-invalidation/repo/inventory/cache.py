"""Memoization keyed by tuples, with explicit invalidation."""

from collections.abc import Callable, Hashable
from typing import Any


class Memo:
    def __init__(self) -> None:
        self._values: dict[tuple[Hashable, ...], Any] = {}
        self.hits = 0
        self.misses = 0

    def get_or_compute(self, key: tuple[Hashable, ...], compute: Callable[[], Any]) -> Any:
        if key in self._values:
            self.hits += 1
            return self._values[key]
        self.misses += 1
        value = compute()
        self._values[key] = value
        return value

    def invalidate(self, key: tuple[Hashable, ...]) -> None:
        self._values.pop(key, None)

    def invalidate_prefix(self, *prefix: Hashable) -> None:
        """Drop every key that starts with ``prefix``."""
        n = len(prefix)
        for key in [k for k in self._values if k[:n] == prefix]:
            del self._values[key]

    def clear(self) -> None:
        self._values.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)
